//! Which proxy, if any, carries the connection to the API server: one rule
//! for the kube-rs transport and the WASM build's JavaScript one.
//!
//! Why not kube-rs's own choice: kube-rs 5 reads `HTTPS_PROXY` whatever the
//! server's scheme, and matches `NO_PROXY` against the *proxy's* URL instead of
//! the server's, so `NO_PROXY` naming the API server changes nothing. The rules
//! here are kubectl's (Go's `net/http` environment proxy), so a machine set up
//! for kubectl behaves the same:
//!
//! 1. The kubeconfig cluster's `proxy-url`, when set, is used as is (`NO_PROXY`
//!    does not apply to it, as in kubectl).
//! 2. Otherwise `HTTPS_PROXY` (then `https_proxy`) for an `https://` server,
//!    `HTTP_PROXY` (then `http_proxy`) for an `http://` one; an empty variable
//!    counts as unset.
//! 3. Unless `NO_PROXY` (then `no_proxy`) names the server: a comma-separated
//!    list of `*` (everything), host names (`example.com` matches it and its
//!    subdomains, `.example.com` and `*.example.com` only subdomains), IP
//!    addresses and CIDR ranges, each optionally with `:port` (then the
//!    server's port, 443/80 by default, must match). Empty entries are ignored.
//!    Unlike Go, loopback servers are not exempt: a proxy is used when asked for.
//!
//! A proxy URL without a scheme is `http://`. Schemes `http`, `https` and
//! `socks5` are accepted. No error ever prints a proxy URL: it may hold
//! `user:password@` (sent as `Proxy-Authorization: Basic` by kube-rs).

use std::net::IpAddr;

use http::Uri;

/// Where the chosen proxy came from, for messages (never the URL itself).
pub type ProxySource = &'static str;

/// The proxy for `server` (see the module docs); `env` reads one environment variable.
pub fn select(
    server: &Uri,
    cluster_proxy_url: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<(Uri, ProxySource)>, String> {
    let nonempty = |name: &'static str| env(name).filter(|v| !v.trim().is_empty()).map(|v| (v, name));
    if let Some(url) = cluster_proxy_url.filter(|u| !u.trim().is_empty()) {
        return parse(url, "the kubeconfig cluster's proxy-url").map(Some);
    }
    let https = server.scheme_str() != Some("http");
    let found = if https {
        nonempty("HTTPS_PROXY").or_else(|| nonempty("https_proxy"))
    } else {
        nonempty("HTTP_PROXY").or_else(|| nonempty("http_proxy"))
    };
    let Some((url, source)) = found else {
        return Ok(None);
    };
    let no_proxy = env("NO_PROXY")
        .filter(|v| !v.trim().is_empty())
        .or_else(|| env("no_proxy"))
        .unwrap_or_default();
    if bypass(&no_proxy, server) {
        return Ok(None);
    }
    parse(&url, source).map(Some)
}

/// [`select`] for a server URL given as text: the proxy URL to use, if any.
/// For a transport that holds the server as a string (the WASM build's).
pub fn select_for_server(
    server: &str,
    cluster_proxy_url: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, String> {
    let server: Uri = server
        .parse()
        .map_err(|_| "the API server's URL is not a valid URL".to_owned())?;
    Ok(select(&server, cluster_proxy_url, env)?.map(|(uri, _)| uri.to_string()))
}

fn parse(url: &str, source: ProxySource) -> Result<(Uri, ProxySource), String> {
    let url = url.trim();
    let url = if url.contains("://") {
        url.to_owned()
    } else {
        format!("http://{url}")
    };
    let uri: Uri = url
        .parse()
        .map_err(|_| format!("the proxy in {source} is not a valid URL"))?;
    match uri.scheme_str() {
        Some("http" | "https" | "socks5") if uri.host().is_some_and(|h| !h.is_empty()) => Ok((uri, source)),
        Some("http" | "https" | "socks5") => Err(format!("the proxy in {source} names no host")),
        // The scheme is not a secret, and it is what needs fixing.
        other => Err(format!(
            "the proxy in {source} uses the unsupported scheme '{}'; use http://, https:// or socks5://",
            other.unwrap_or("")
        )),
    }
}

/// Whether `no_proxy` (a `NO_PROXY` value) names `server`.
pub fn bypass(no_proxy: &str, server: &Uri) -> bool {
    let Some(host) = server.host() else {
        return false;
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let port = server
        .port_u16()
        .unwrap_or(if server.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    let host_ip: Option<IpAddr> = host.parse().ok();
    no_proxy
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|entry| entry == "*" || entry_matches(&entry.to_ascii_lowercase(), &host, host_ip, port))
}

fn entry_matches(entry: &str, host: &str, host_ip: Option<IpAddr>, port: u16) -> bool {
    if let Some((net, bits)) = entry.split_once('/') {
        return match (net.parse::<IpAddr>(), bits.parse::<u8>(), host_ip) {
            (Ok(net), Ok(bits), Some(ip)) => in_cidr(ip, net, bits),
            _ => false,
        };
    }
    let (name, entry_port) = split_port(entry);
    if entry_port.is_some_and(|p| p != port) {
        return false;
    }
    let name = name.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = name.parse::<IpAddr>() {
        return host_ip == Some(ip);
    }
    if host_ip.is_some() {
        return false;
    }
    let name = name.strip_prefix('*').unwrap_or(name);
    if name.starts_with('.') {
        host.ends_with(name)
    } else {
        host == name || host.strip_suffix(name).is_some_and(|rest| rest.ends_with('.'))
    }
}

/// `host:port` into its parts; a bare IPv6 address (several colons, no brackets) has no port.
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if entry.matches(':').count() > 1 && !entry.starts_with('[') {
        return (entry, None);
    }
    match entry.rsplit_once(':') {
        Some((name, port)) if !name.is_empty() => match port.parse() {
            Ok(p) => (name, Some(p)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn uri(s: &str) -> Uri {
        s.parse().expect("test URI")
    }

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn chosen(server: &str, cluster: Option<&str>, vars: &[(&str, &str)]) -> Option<String> {
        select(&uri(server), cluster, env(vars))
            .expect("valid")
            .map(|(u, _)| u.to_string())
    }

    #[test]
    fn the_variable_follows_the_server_scheme() {
        let vars = [
            ("HTTPS_PROXY", "http://s.proxy:3128"),
            ("HTTP_PROXY", "http://p.proxy:3128"),
        ];
        assert_eq!(
            chosen("https://k8s:6443", None, &vars).as_deref(),
            Some("http://s.proxy:3128/")
        );
        assert_eq!(
            chosen("http://k8s:8080", None, &vars).as_deref(),
            Some("http://p.proxy:3128/")
        );
        // Lower-case spellings, and an empty upper-case one counts as unset.
        let vars = [("HTTPS_PROXY", ""), ("https_proxy", "proxy.corp:8080")];
        assert_eq!(
            chosen("https://k8s", None, &vars).as_deref(),
            Some("http://proxy.corp:8080/")
        );
        // HTTP_PROXY does not apply to an https server (as in kubectl).
        assert_eq!(chosen("https://k8s", None, &[("HTTP_PROXY", "http://p:1")]), None);
        assert_eq!(chosen("https://k8s", None, &[]), None);
    }

    #[test]
    fn the_kubeconfig_proxy_url_wins_and_ignores_no_proxy() {
        let vars = [("HTTPS_PROXY", "http://env:1"), ("NO_PROXY", "*")];
        assert_eq!(
            chosen("https://k8s", Some("socks5://kc:1080"), &vars).as_deref(),
            Some("socks5://kc:1080/")
        );
        assert_eq!(
            chosen("https://k8s", Some(""), &vars),
            None,
            "empty is unset; * bypasses env"
        );
    }

    #[test]
    fn no_proxy_names_the_server() {
        let https = |s: &str, no_proxy: &str| {
            chosen(s, None, &[("HTTPS_PROXY", "http://p:1"), ("NO_PROXY", no_proxy)]).is_none()
        };
        assert!(https("https://k8s.corp.example:6443", "*"));
        assert!(https("https://k8s.corp.example:6443", "other, corp.example"));
        assert!(https("https://corp.example", "corp.example"));
        assert!(https("https://k8s.corp.example", ".corp.example"));
        assert!(https("https://k8s.corp.example", "*.corp.example"));
        assert!(!https("https://corp.example", ".corp.example"), "subdomains only");
        assert!(
            !https("https://evilcorp.example", "corp.example"),
            "a label boundary"
        );
        assert!(https("https://K8S.Corp.Example", "k8s.corp.EXAMPLE"));
        assert!(https("https://10.1.2.3:6443", "10.0.0.0/8"));
        assert!(!https("https://11.1.2.3:6443", "10.0.0.0/8"));
        assert!(https("https://10.1.2.3:6443", "10.1.2.3"));
        assert!(https("https://[fd00::5]:6443", "fd00::/64"));
        assert!(https("https://[::1]:6443", "::1"));
        assert!(https("https://[::1]:6443", "[::1]:6443"));
        assert!(https("https://k8s:6443", "k8s:6443"));
        assert!(!https("https://k8s:6443", "k8s:443"), "the port must match");
        assert!(https("https://k8s", "k8s:443"), "https defaults to 443");
        assert!(!https("https://10.1.2.3", "k8s,,"), "empty entries are ignored");
        // The lower-case spelling is read when the upper-case one is unset.
        assert_eq!(
            chosen(
                "https://k8s",
                None,
                &[("HTTPS_PROXY", "http://p:1"), ("no_proxy", "k8s")]
            ),
            None
        );
    }

    #[test]
    fn bad_proxies_are_refused_without_printing_them() {
        for (value, words) in [
            ("ftp://alice:s3cret@p:21", "unsupported scheme 'ftp'"),
            ("http://alice:s3cret@", "not a valid URL"),
            ("http://alice:s3cret@p:1 2", "not a valid URL"),
        ] {
            let e = select(&uri("https://k8s"), None, env(&[("HTTPS_PROXY", value)])).expect_err(value);
            assert!(e.contains(words), "{value}: {e}");
            assert!(e.contains("HTTPS_PROXY"), "{e}");
            assert!(!e.contains("s3cret") && !e.contains("alice"), "{e}");
        }
    }
}
