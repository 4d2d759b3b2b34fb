//! The one place that renders the exec command.
//!
//! A statement of `N` UTF-8 bytes is sent on stdin and run as `sh -c SCRIPT`,
//! where SCRIPT is (one line in argv, spread out here):
//!
//! ```text
//! exec 3<&0; p=${<passwordEnv>:-}
//! t=; if timeout -k 2 1 true >/dev/null 2>&1; then t='timeout -k 2 <S+3>'
//!     elif timeout 1 true >/dev/null 2>&1; then t='timeout <S+3>'; fi
//! s=$($t head -c <N> <&3; echo .); s=${s%.}; n=$(printf '%s' "$s" | wc -c)
//! if [ $((n)) -ne <N> ]; then echo "...ended after $((n)) of <N> bytes..." >&2; exit 75; fi
//! { printf '<?xml version="1.0"?><yandex><password>'
//!   printf '%s' "$p" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g'
//!   printf '</password></yandex>\n'
//! } | { exec 4<&0
//!       printf '%s' "$s" 4<&- | exec $t clickhouse-client --config-file=/dev/fd/4 --host=localhost \
//!         --user=... --database=... --port=... [--query_id=...] --<setting>=... --max_execution_time=<S> 3<&-; }
//! ```
//!
//! Why each part:
//!
//! - The statement is on stdin, never in argv: argv is readable from `/proc`
//!   by every process in the pod and is written to exec audit logs.
//! - The password never enters any process's argv either. `printf` is a shell
//!   builtin, so expanding the container's `<passwordEnv>` into it creates no
//!   process (nor does assigning it to `p` first, before the command sets a
//!   variable of its own, so a `<passwordEnv>` named `s` or `t` is still the
//!   container's); `sed` (which XML-escapes it) reads it on stdin; and
//!   clickhouse-client reads it from a client configuration file that is the
//!   read end of a pipe (`/dev/fd/4`). Both 18.16 and current clients read a
//!   non-regular config file as XML exactly once. `:-` turns an unset
//!   variable into the empty password of a stock `default` user. A password
//!   starting with `-` is just text inside the file.
//! - `head -c N` ends clickhouse-client's input after exactly the statement,
//!   whether or not the exec protocol can signal end-of-stdin: the v4 channel
//!   protocol has no such signal, and closing the socket there loses the exit
//!   status. With the byte count in the command, v4 and v5 behave alike. Fd 3
//!   keeps the exec's stdin while fd 0 carries the configuration.
//! - The whole statement is read before the client starts, into a shell
//!   variable (`$(...)` with a `.` after it keeps trailing newlines; `printf`
//!   is a builtin, so no argv carries it), and counted: an exec whose stdin
//!   ended early (its connection dropped half way through a long statement,
//!   while the kubelet keeps its process running) exits `INPUT_CUT_EXIT_CODE`
//!   and runs nothing. Otherwise `head` would hand the client the part that
//!   arrived, which can parse as another statement (`DROP TABLE db.events_old`
//!   cut to `DROP TABLE db.events`). The read is under the pod-side bound
//!   too: an input that stalls short of its size without ending would
//!   otherwise keep `head` in the pod for good (its argv carries no query id
//!   for a stop to find).
//! - The statement is bounded where it runs, not only by the caller's exec
//!   timeout (closing an exec connection does not always end the remote
//!   process): by `max_execution_time` on the server (unless the settings set
//!   it), and by `timeout` in the pod where the image has it (TERM
//!   `POD_GRACE_SECS` after `S` seconds, so ClickHouse's own, clearer
//!   error normally comes first; KILL `POD_KILL_AFTER_SECS` later). The
//!   caller waits `exec_timeout`, longer still, so the pod's bound fires
//!   before the caller gives up and a retry never overlaps a statement that
//!   is still running.
//! - A user's statement carries a query id (`render_statement`), so a
//!   cancelled deploy can find it on the server and stop it (`KILL QUERY`)
//!   before it lets another deploy in: closing the exec connection leaves the
//!   process running in the pod on a real cluster. The id names the run, the
//!   statement and the pod, nothing secret; the same id for a retry of the
//!   same statement on the same pod makes the server refuse the retry while
//!   an earlier attempt still runs (code 216) instead of running it twice.
//! - Which `timeout` the image has is found out by running it once on `true`:
//!   GNU coreutils and BusyBox from 1.35 take `-k` (KILL after the grace);
//!   BusyBox 1.30 to 1.34 (Alpine images before 3.16) refuse `-k` and print
//!   their usage, so there the bound is `timeout <S+3>` alone (TERM; a client
//!   that ignores it is left to the caller's exec timeout); an image with no
//!   `timeout`, or one that takes neither form, runs the client unbounded in
//!   the pod. The probe costs two short processes per exec.
//! - `--host=localhost` names the pod's own server, which is what the client
//!   reaches without a host too, but only while nothing else names one: a
//!   current client (25.7+) takes `CLICKHOUSE_HOST` from the container's
//!   environment when argv and the configuration give no host, and would send
//!   the statements and the password there. `localhost` is the default both
//!   clients already use, so the server they reach is the same as before.
//! - `exec` makes clickhouse-client's (or `timeout`'s) exit status the exec's.
//! - Every value-bearing option is one argv word, `--name=value`, with the
//!   value single-quoted for `sh`: a user name, database or setting value
//!   cannot change the command, and a value starting with `-` cannot be read
//!   as another option. Setting names never collide with client options
//!   (validation refuses those), so a setting cannot redirect the client.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{ClientConfig, SettingValue};

/// Seconds the pod's `timeout` waits past the server's bound before TERM: long enough for a client
/// on a busy node (a throttled container, a loaded machine) to print the server's error and exit,
/// so the user reads ClickHouse's code rather than the pod's TERM (a second was not, measured).
pub(crate) const POD_GRACE_SECS: u64 = 3;

/// Seconds between `timeout`'s TERM and its KILL in the pod.
pub(crate) const POD_KILL_AFTER_SECS: u64 = 2;

/// The server the client is told to reach: the pod's own (see the module header).
pub(crate) const LOCAL_SERVER: &str = "localhost";

/// The ClickHouse setting that bounds a statement on the server.
pub(crate) const SERVER_TIME_LIMIT_SETTING: &str = "max_execution_time";

/// Exit status of GNU `timeout` when it stopped the command (TERM), of a
/// command killed by KILL (128 + 9), and of one BusyBox's `timeout` stopped
/// (it execs the command and TERMs it: 128 + 15).
pub const POD_TIMEOUT_EXIT_CODES: [i32; 3] = [124, 137, 143];

/// Exit status of a client whose query the server refused because a query
/// with its `--query_id` still runs (QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING,
/// code 216; the client exits with the code modulo 256).
pub const QUERY_ID_IN_USE_EXIT_CODE: i32 = 216;

/// Exit status of an exec whose stdin ended before the statement's bytes had all arrived: nothing
/// was run (see the module header). Its stderr starts with `INPUT_CUT_MARKER`, and holds no code.
pub const INPUT_CUT_EXIT_CODE: i32 = 75;

/// How the stderr of such an exec starts.
pub const INPUT_CUT_MARKER: &str = "clickhouse-schema";

/// QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING as the client prints it (`Code: 216.`).
pub const QUERY_ID_IN_USE_CODE: u32 = 216;

/// The statement's bound in whole seconds, rounded up (at least 1): what
/// `max_execution_time` receives, and where the pod's grace starts.
pub(crate) fn bound_secs(statement_timeout: Duration) -> u64 {
    statement_timeout.as_millis().div_ceil(1000).max(1) as u64
}

/// Seconds after which `timeout` in the pod sends TERM.
pub(crate) fn pod_timeout_secs(statement_timeout: Duration) -> u64 {
    bound_secs(statement_timeout) + POD_GRACE_SECS
}

/// How long the caller waits for an exec before abandoning it: the pod-side
/// bound, its KILL grace, and one more second for the exit status to arrive.
pub(crate) fn exec_timeout(statement_timeout: Duration) -> Duration {
    Duration::from_secs(pod_timeout_secs(statement_timeout) + POD_KILL_AFTER_SECS + 1)
}

/// argv for running a statement of `statement_bytes` UTF-8 bytes, bounded by
/// `statement_timeout`.
pub fn render(
    client: &ClientConfig,
    settings: &BTreeMap<String, SettingValue>,
    statement_bytes: usize,
    statement_timeout: Duration,
) -> Vec<String> {
    render_with(client, settings, statement_bytes, statement_timeout, "")
}

/// [`render`] for one of the user's statements, run under `query_id` (see the module header).
pub fn render_statement(
    client: &ClientConfig,
    settings: &BTreeMap<String, SettingValue>,
    statement_bytes: usize,
    statement_timeout: Duration,
    query_id: &str,
) -> Vec<String> {
    let flags = format!(" --query_id={}", shell_quote(query_id));
    render_with(client, settings, statement_bytes, statement_timeout, &flags)
}

/// argv for running a script of several statements of `script_bytes` UTF-8 bytes: the same
/// command with `--multiquery --ignore-error`, so every statement of the script runs even when
/// one before it failed (live-schema verification relies on its last statements always running:
/// they drop the scratch database and mark the end of the output).
pub fn render_script(
    client: &ClientConfig,
    settings: &BTreeMap<String, SettingValue>,
    script_bytes: usize,
    statement_timeout: Duration,
) -> Vec<String> {
    render_with(
        client,
        settings,
        script_bytes,
        statement_timeout,
        " --multiquery --ignore-error",
    )
}

/// argv for a script whose statements must all succeed (the ledger's write): `--multiquery`
/// alone, so the first failure ends it with a non-zero exit code.
pub fn render_multiquery(
    client: &ClientConfig,
    settings: &BTreeMap<String, SettingValue>,
    script_bytes: usize,
    statement_timeout: Duration,
) -> Vec<String> {
    render_with(client, settings, script_bytes, statement_timeout, " --multiquery")
}

/// [`render_multiquery`] for a script that changes something (a convergence script, a rebuild
/// step), run under `query_id` so that it can be stopped where it runs (see the module header).
/// The client sends the one id with each statement of the script in turn.
pub fn render_multiquery_as(
    client: &ClientConfig,
    settings: &BTreeMap<String, SettingValue>,
    script_bytes: usize,
    statement_timeout: Duration,
    query_id: &str,
) -> Vec<String> {
    let flags = format!(" --multiquery --query_id={}", shell_quote(query_id));
    render_with(client, settings, script_bytes, statement_timeout, &flags)
}

/// argv for a pod's whole statement list in one exec (see `reconcile::batch`): the script of
/// `script_bytes` with `--multiquery` under `query_id`, each of its `statements` statements bounded
/// by `statement_timeout` on the server as one statement alone is, and the pod-side `timeout` (and
/// the read of the input) bounded by their sum. The marker queries between them are not counted:
/// each is a constant `SELECT`.
///
/// With `check` (the byte count of the live-schema check's script, which then follows the
/// statements' script in the input), a second client runs the check as [`render_script`] runs it
/// (without a query id, as there: it changes only its scratch database, and a stop need not find
/// it), once the first exited 0, and [`STATEMENTS_ENDED_LABEL`] is printed between them on stdout
/// and on stderr: a check cannot run after a failed statement, and its output cannot pass for the
/// statements' (nothing prints the label but the shell, after the first client ended). The exec's
/// status is then 0: the check's output decides, and a check the pod's `timeout` ended is no
/// statement left running.
pub fn render_batch(
    client: &ClientConfig,
    settings: &BTreeMap<String, SettingValue>,
    script_bytes: usize,
    statement_timeout: Duration,
    statements: usize,
    query_id: &str,
    check: Option<usize>,
) -> Vec<String> {
    let flags = format!(" --multiquery --query_id={}", shell_quote(query_id));
    let then = check.map(|bytes| Then {
        first_bytes: script_bytes - bytes,
        flags: " --multiquery --ignore-error",
        pod_secs: pod_timeout_secs(statement_timeout),
    });
    render_runs(
        client,
        settings,
        script_bytes,
        bound_secs(statement_timeout),
        batch_pod_timeout_secs(statement_timeout, statements),
        &flags,
        then,
    )
}

/// What the shell prints between a batch's statements and its live-schema check (see
/// [`render_batch`]).
pub const STATEMENTS_ENDED_LABEL: &str = "clickhouse-schema-statements-ended";

/// Seconds after which `timeout` in the pod sends TERM to a batch of `statements` statements:
/// the sum of their bounds, and one grace.
pub(crate) fn batch_pod_timeout_secs(statement_timeout: Duration, statements: usize) -> u64 {
    bound_secs(statement_timeout).saturating_mul(statements.max(1) as u64) + POD_GRACE_SECS
}

/// How long the caller waits for a batch of `statements` statements (see [`exec_timeout`]), and
/// for the live-schema check after them when it is `checked`.
pub(crate) fn batch_exec_timeout(statement_timeout: Duration, statements: usize, checked: bool) -> Duration {
    let check = if checked {
        pod_timeout_secs(statement_timeout) + POD_KILL_AFTER_SECS
    } else {
        0
    };
    Duration::from_secs(
        batch_pod_timeout_secs(statement_timeout, statements) + check + POD_KILL_AFTER_SECS + 1,
    )
}

/// Labels of the lines the stop's pod part prints (see [`render_stop`]): how many processes
/// it ended, and how many it still finds after that (`unknown` when `/proc` cannot be read).
pub const POD_ENDED_LABEL: &str = "clickhouse-schema-pod-ended";
/// See [`POD_ENDED_LABEL`].
pub const POD_LEFT_LABEL: &str = "clickhouse-schema-pod-left";

/// The prefix every query id of this package starts with (see `reconcile::abandoned`).
pub(crate) const QUERY_ID_PREFIX: &str = "clickhouse-schema-";

/// How many rounds of kills the stop makes in the pod before it counts what is left.
const KILL_ROUNDS: u32 = 3;

/// How long the pod part of a stop may take before its client starts (outside the client's
/// bound): a second after each round of kills, and one more for the scans of `/proc`. The
/// caller's exec timeout for a stop adds it.
pub(crate) const STOP_POD_PART: Duration = Duration::from_secs(KILL_ROUNDS as u64 + 1);

/// argv for stopping the execs that ran under `query_ids` on a pod: first, in the pod, every
/// process whose command line carries one of the ids (the exec's `sh`, `timeout` and client,
/// which on a real cluster outlive their closed exec) is killed, and the processes that still
/// carry one are counted; then the KILL script of `script_bytes` (on stdin) runs as
/// [`render_multiquery`] runs it. A client killed in the pod sends no further statement of its
/// script, which `KILL QUERY` alone cannot promise: it stops the statement running, if any, and
/// the client sends the next. The ids are spelled so that this command's own argv does not carry
/// them (a shell variable holds their common prefix), or it would kill itself. A second look,
/// a second after the last round of kills (SIGKILL is delivered, not awaited), counts what is left.
pub fn render_stop(
    client: &ClientConfig,
    query_ids: &[&str],
    script_bytes: usize,
    statement_timeout: Duration,
) -> Vec<String> {
    // Each process's command line is read by `tr` with its NULs turned into `'`, and matched by
    // the shell (`case`): BusyBox's grep stops at a line's first NUL, so it would only ever see
    // the program's name. The `'` after the id is where it ends both in the client's argument
    // (`--query_id=<id>` then NUL) and in the wrapper's script (`--query_id='<id>'`), so the id of
    // pod chi-1 does not match chi-10's. An id without the package's prefix, or none at all,
    // would match what it must not: then the pod's processes are not looked at (`unknown`).
    let patterns: Option<Vec<String>> = query_ids
        .iter()
        .map(|id| {
            let rest = id.strip_prefix(QUERY_ID_PREFIX).filter(|r| !r.is_empty())?;
            Some(format!("*\"$p\"{}*", shell_quote(&format!("-{rest}'"))))
        })
        .collect();
    let prelude = match patterns.filter(|p| !p.is_empty()) {
        None => format!("printf '{POD_ENDED_LABEL}\\t0\\n{POD_LEFT_LABEL}\\tunknown\\n'; "),
        Some(patterns) => {
            let patterns = patterns.join("|");
            let scan = |action: &str| {
                format!(
                    "for d in /proc/[0-9]*; do i=${{d#/proc/}}; [ \"$i\" = \"$$\" ] && continue; \
                     c=$(tr '\\000' \"'\" < \"$d/cmdline\" 2>/dev/null) || continue; \
                     case \"$c\" in {patterns}) {action};; esac; done"
                )
            };
            // Whether this shell can read command lines at all: its own must show its prefix.
            // Up to three rounds of kills, each after the last one's processes had a second to go,
            // before the count: a process forked after a round's listing (the client `timeout`
            // starts once its parent's `sh` is killed) is found by the next round.
            format!(
                "p={prefix}; k=0; l=0; c=$(tr '\\000' ' ' < /proc/$$/cmdline 2>/dev/null); \
                 case \"$c\" in *\"p=$p;\"*) \
                 r=0; while [ $r -lt {KILL_ROUNDS} ]; do r=$((r+1)); j=$k; {kill}; \
                 [ \"$k\" -gt \"$j\" ] || break; sleep 1; done; \
                 {count}; \
                 printf '{POD_ENDED_LABEL}\\t%s\\n{POD_LEFT_LABEL}\\t%s\\n' \"$k\" \"$l\";; \
                 *) printf '{POD_ENDED_LABEL}\\t0\\n{POD_LEFT_LABEL}\\tunknown\\n';; esac; ",
                prefix = QUERY_ID_PREFIX.trim_end_matches('-'),
                kill = scan("kill -9 \"$i\" 2>/dev/null && k=$((k+1))"),
                count = scan("l=$((l+1))"),
            )
        }
    };
    let mut argv = render_multiquery(client, &BTreeMap::new(), script_bytes, statement_timeout);
    argv[2] = format!("{prelude}{}", argv[2]);
    argv
}

fn render_with(
    client: &ClientConfig,
    settings: &BTreeMap<String, SettingValue>,
    statement_bytes: usize,
    statement_timeout: Duration,
    flags: &str,
) -> Vec<String> {
    render_runs(
        client,
        settings,
        statement_bytes,
        bound_secs(statement_timeout),
        pod_timeout_secs(statement_timeout),
        flags,
        None,
    )
}

/// A second client run in the same exec, after the first exited 0 (see [`render_batch`]): the
/// input past its first `first_bytes` bytes, with `flags`, bounded in the pod by `pod_secs`.
struct Then<'f> {
    first_bytes: usize,
    flags: &'f str,
    pod_secs: u64,
}

/// The client's arguments after `--config-file`: where it connects, `flags`, the settings, and
/// the server's bound `secs` unless the settings set one.
fn client_args(
    client: &ClientConfig,
    settings: &BTreeMap<String, SettingValue>,
    secs: u64,
    flags: &str,
) -> String {
    let mut args = format!(
        "--config-file=/dev/fd/4 --host={LOCAL_SERVER} --user={} --database={} --port={}{flags}",
        shell_quote(&client.user),
        shell_quote(&client.database),
        client.port,
    );
    for (name, value) in settings {
        // Names are [a-z_][a-z0-9_]* and never a client option, by validation; the value is quoted.
        args.push_str(&format!(" --{name}={}", shell_quote(&value.render())));
    }
    if !settings.contains_key(SERVER_TIME_LIMIT_SETTING) {
        args.push_str(&format!(" --{SERVER_TIME_LIMIT_SETTING}={secs}"));
    }
    args
}

/// The command, with `secs` as the server's bound of each statement and `pod_secs` as the pod's,
/// and when `then` is given a second client run after the first one exited 0, with [`STATEMENTS_ENDED_LABEL`] printed between them. Each run gets its part of the one
/// input that was read and counted: `head -c` and `tail -c +` cut it by the byte count in argv,
/// which a shell's pattern removal could do only in time quadratic in the input's size.
fn render_runs(
    client: &ClientConfig,
    settings: &BTreeMap<String, SettingValue>,
    statement_bytes: usize,
    secs: u64,
    pod_secs: u64,
    flags: &str,
    then: Option<Then<'_>>,
) -> Vec<String> {
    let first_args = client_args(client, settings, secs, flags);
    // `p` holds the password, read from the container's variable before the command sets any of
    // its own (`s`, `n`, `t`, ...), so that a passwordEnv of the same name still names the
    // container's.
    let config = "{ printf '<?xml version=\"1.0\"?><yandex><password>'; \
         printf '%s' \"$p\" | sed -e 's/&/\\&amp;/g' -e 's/</\\&lt;/g' -e 's/>/\\&gt;/g'; \
         printf '</password></yandex>\\n'; }";
    let (bounds, kill_bounds, runs) = match &then {
        None => (
            format!("t='timeout {pod_secs}'"),
            format!("t='timeout -k {POD_KILL_AFTER_SECS} {pod_secs}'"),
            format!(
                "{config} | \
                 {{ exec 4<&0; printf '%s' \"$s\" 4<&- | exec $t clickhouse-client {first_args} 3<&-; }}"
            ),
        ),
        Some(then) => {
            let second_args = client_args(client, settings, secs, then.flags);
            let (first, second) = (then.first_bytes, then.first_bytes + 1);
            (
                format!("t='timeout {pod_secs}'; u='timeout {}'", then.pod_secs),
                format!(
                    "t='timeout -k {POD_KILL_AFTER_SECS} {pod_secs}'; u='timeout -k {POD_KILL_AFTER_SECS} {}'",
                    then.pod_secs
                ),
                // `printf` feeding `head` meets a closed pipe once `head` has its bytes: its error
                // (where SIGPIPE is ignored) is not the statements'. The exec's status is the first
                // client's, or 0 once the label is printed: the check's output decides, not its status.
                format!(
                    "{config} | \
                     {{ exec 4<&0; printf '%s' \"$s\" 4<&- 2>/dev/null | head -c {first} 3<&- 4<&- | \
                     exec $t clickhouse-client {first_args} 3<&-; }}; \
                     r=$?; if [ $r -ne 0 ]; then exit $r; fi; \
                     echo {STATEMENTS_ENDED_LABEL}; echo {STATEMENTS_ENDED_LABEL} >&2; \
                     {config} | \
                     {{ exec 4<&0; printf '%s' \"$s\" 4<&- | tail -c +{second} 3<&- 4<&- | \
                     exec $u clickhouse-client {second_args} 3<&-; }}; exit 0"
                ),
            )
        }
    };
    let unset = if then.is_some() { "t=; u=;" } else { "t=;" };
    // Validation restricts the name to [A-Za-z_][A-Za-z0-9_]*, so it is safe unquoted inside ${...}.
    let script = format!(
        "exec 3<&0; p=${{{env}:-}}; \
         {unset} if timeout -k {POD_KILL_AFTER_SECS} 1 true >/dev/null 2>&1; \
         then {kill_bounds}; \
         elif timeout 1 true >/dev/null 2>&1; then {bounds}; fi; \
         s=$($t head -c {statement_bytes} <&3; echo .); s=${{s%.}}; n=$(printf '%s' \"$s\" | wc -c); \
         if [ $((n)) -ne {statement_bytes} ]; then \
         echo \"{INPUT_CUT_MARKER}: the exec's input ended after $((n)) of {statement_bytes} bytes; nothing was run\" >&2; \
         exit {INPUT_CUT_EXIT_CODE}; fi; \
         {runs}",
        env = client.password_env,
    );
    vec!["sh".to_owned(), "-c".to_owned(), script]
}

/// Quotes `value` as one POSIX `sh` word: single quotes, with each embedded
/// single quote written as `'\''`.
pub(crate) fn shell_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for ch in value.chars() {
        if ch == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(ch);
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Number;

    fn client() -> ClientConfig {
        ClientConfig {
            user: "default".into(),
            database: "default".into(),
            password_env: "CLICKHOUSE_PASSWORD".into(),
            port: 9000,
        }
    }

    const FIVE_MINUTES: Duration = Duration::from_secs(300);

    #[test]
    fn renders_every_value_as_one_word_after_the_config_file() {
        let mut settings = BTreeMap::new();
        settings.insert(
            "distributed_ddl_task_timeout".to_owned(),
            SettingValue::Number(Number::from(300)),
        );
        settings.insert("a_mode".to_owned(), SettingValue::String("x y".into()));
        let argv = render(&client(), &settings, 42, FIVE_MINUTES);
        assert_eq!(argv[..2], ["sh", "-c"]);
        assert!(
            argv[2].contains(
                "printf '%s' \"$s\" 4<&- | exec $t clickhouse-client --config-file=/dev/fd/4 --host=localhost --user='default' \
                 --database='default' --port=9000 --a_mode='x y' --distributed_ddl_task_timeout='300' \
                 --max_execution_time=300 3<&-"
            ),
            "{}",
            argv[2]
        );
        assert!(argv[2].contains("t='timeout -k 2 303'"), "{}", argv[2]);
        assert!(argv[2].contains("t='timeout 303'"), "{}", argv[2]);
        assert!(!argv[2].contains("--password"), "{}", argv[2]);
    }

    #[test]
    fn a_statement_carries_its_query_id_as_one_word() {
        let argv = render_statement(&client(), &BTreeMap::new(), 8, FIVE_MINUTES, "chs-0a1b-s2-chi-0");
        assert!(
            argv[2].contains("--port=9000 --query_id='chs-0a1b-s2-chi-0' --max_execution_time=300 3<&-"),
            "{}",
            argv[2]
        );
        assert!(!render(&client(), &BTreeMap::new(), 8, FIVE_MINUTES)[2].contains("query_id"));
    }

    #[test]
    fn a_server_time_limit_set_by_the_user_wins() {
        let mut settings = BTreeMap::new();
        settings.insert(
            SERVER_TIME_LIMIT_SETTING.to_owned(),
            SettingValue::Number(Number::from(7)),
        );
        let argv = render(&client(), &settings, 1, Duration::from_millis(1500));
        assert!(argv[2].contains("--max_execution_time='7' 3<&-"), "{}", argv[2]);
        assert_eq!(argv[2].matches("max_execution_time").count(), 1);
        // The pod-side bound still follows statementTimeoutMs, rounded up.
        assert!(argv[2].contains("t='timeout -k 2 5'"), "{}", argv[2]);
    }

    #[test]
    fn bounds_round_up_to_whole_seconds_and_the_caller_waits_longer() {
        assert_eq!(bound_secs(Duration::from_millis(1)), 1);
        assert_eq!(bound_secs(Duration::from_millis(1000)), 1);
        assert_eq!(bound_secs(Duration::from_millis(1001)), 2);
        assert_eq!(pod_timeout_secs(Duration::from_millis(1000)), 4);
        assert_eq!(exec_timeout(Duration::from_millis(1000)), Duration::from_secs(7));
    }

    #[test]
    fn a_batch_bounds_each_statement_on_the_server_and_their_sum_in_the_pod() {
        let argv = render_batch(
            &client(),
            &BTreeMap::new(),
            99,
            Duration::from_millis(1500),
            12,
            "chs-b0-chi-0",
            None,
        );
        assert!(
            argv[2]
                .contains("--port=9000 --multiquery --query_id='chs-b0-chi-0' --max_execution_time=2 3<&-"),
            "{}",
            argv[2]
        );
        // 12 statements of 2 s each, and the one grace.
        assert!(argv[2].contains("t='timeout -k 2 27'"), "{}", argv[2]);
        assert!(argv[2].contains("head -c 99 <&3"), "{}", argv[2]);
        assert_eq!(
            batch_exec_timeout(Duration::from_millis(1500), 12, false),
            Duration::from_secs(30)
        );
        // The check after them: its own statement's bound and grace in the pod, and the kill's.
        assert_eq!(
            batch_exec_timeout(Duration::from_millis(1500), 12, true),
            Duration::from_secs(30 + 5 + 2)
        );
        // Without a check, one client run, as any other command of this module.
        assert!(!argv[2].contains(STATEMENTS_ENDED_LABEL));
        assert_eq!(argv[2].matches("clickhouse-client").count(), 1);
    }

    /// Runs `argv` with a stand-in `clickhouse-client` that prints its arguments and the
    /// configuration it reads on fd 4 to stderr, its input to stdout, and exits with the code
    /// `CODE_<n>` holds for its n-th run (0 without it); stdout, stderr and exit status.
    fn run_with_stand_in(argv: &[String], stdin: &str, env: &[(&str, &str)]) -> (String, String, i32) {
        let dir = scratch_dir("runs");
        let count = dir.join("count");
        stand_in(
            &dir,
            "clickhouse-client",
            &format!(
                "#!/bin/sh\n\
                 n=$(( $(cat {c} 2>/dev/null || echo 0) + 1 )); echo $n > {c}\n\
                 echo \"run $n: $*\" >&2; echo \"config $n: $(cat /dev/fd/4)\" >&2\n\
                 cat\n\
                 eval \"exit \\${{CODE_$n:-0}}\"\n",
                c = count.display()
            ),
        );
        let out = run_in(&dir, argv, env, stdin);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.status.code().unwrap_or(-1),
        )
    }

    #[test]
    fn a_password_variable_named_like_one_of_the_commands_own_is_still_the_containers() {
        for name in ["s", "n", "t", "u", "r", "p"] {
            let client = ClientConfig {
                password_env: name.to_owned(),
                ..client()
            };
            let input = "SELECT 1;\nSELECT 2;\n";
            let argv = render_batch(
                &client,
                &BTreeMap::new(),
                input.len(),
                Duration::from_millis(1500),
                1,
                "chs-b0-chi-0",
                Some(10),
            );
            let (_, stderr, code) = run_with_stand_in(&argv, input, &[(name, "pa$$ word")]);
            assert_eq!(code, 0, "{name}: {stderr}");
            assert_eq!(
                stderr.matches("<password>pa$$ word</password>").count(),
                2,
                "{name}: {stderr}"
            );
        }
    }

    #[test]
    fn a_checked_batch_runs_the_check_with_the_rest_of_the_input_only_after_the_statements_succeeded() {
        // Multi-byte text at the cut: the parts are cut by bytes, as the input is counted.
        let statements = "CREATE TABLE é;\nSELECT 'ü';\n";
        let check = "CREATE DATABASE s;\nSELECT 'end';\n";
        let input = format!("{statements}{check}");
        let argv = render_batch(
            &client(),
            &BTreeMap::new(),
            input.len(),
            Duration::from_millis(1500),
            2,
            "chs-b0-chi-0",
            Some(check.len()),
        );
        let secret = [("CLICKHOUSE_PASSWORD", "p<&>w")];
        let (stdout, stderr, code) = run_with_stand_in(&argv, &input, &secret);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(stdout, format!("{statements}{STATEMENTS_ENDED_LABEL}\n{check}"));
        assert!(
            stderr.contains(
                "run 1: --config-file=/dev/fd/4 --host=localhost --user=default --database=default \
                             --port=9000 --multiquery --query_id=chs-b0-chi-0 --max_execution_time=2"
            ),
            "{stderr}"
        );
        assert!(
            stderr.contains(
                "run 2: --config-file=/dev/fd/4 --host=localhost --user=default --database=default \
                             --port=9000 --multiquery --ignore-error --max_execution_time=2"
            ),
            "{stderr}"
        );
        // The label on stderr too: what comes after it there is the check's.
        let (before, after) = stderr
            .split_once(STATEMENTS_ENDED_LABEL)
            .expect("the label on stderr");
        assert!(
            before.contains("run 1") && !before.contains("run 2") && after.contains("run 2"),
            "{stderr}"
        );
        // Each run reads the password from its own pipe, escaped; no argv carries it.
        assert_eq!(
            stderr.matches("<password>p&lt;&amp;&gt;w</password>").count(),
            2,
            "{stderr}"
        );
        assert!(!argv[2].contains("p<&>w"));
        // Each client bounded in the pod: the statements by their sum, the check by its own.
        assert!(
            argv[2].contains("t='timeout -k 2 7'; u='timeout -k 2 5'"),
            "{}",
            argv[2]
        );

        // A failed statement ends the exec with its client's status: no label, no check.
        let (stdout, stderr, code) = run_with_stand_in(&argv, &input, &[("CODE_1", "60")]);
        assert_eq!(code, 60, "{stderr}");
        assert_eq!(stdout, statements);
        assert!(!stderr.contains("run 2"), "{stderr}");

        // Once the statements succeeded the exec's status is 0, whatever the check's client exits:
        // its output decides.
        let (stdout, _, code) = run_with_stand_in(&argv, &input, &[("CODE_2", "124")]);
        assert_eq!(code, 0);
        assert!(stdout.contains(STATEMENTS_ENDED_LABEL));

        // An input cut short runs neither.
        let (stdout, stderr, code) = run_with_stand_in(&argv, &input[..input.len() - 3], &[]);
        assert_eq!(code, INPUT_CUT_EXIT_CODE, "{stderr}");
        assert_eq!(stdout, "");
        assert!(!stderr.contains("run 1"), "{stderr}");
    }

    /// `script` as the executable `name` in `dir` (a stand-in program on the PATH of [`run_in`]).
    fn stand_in(dir: &std::path::Path, name: &str, script: &str) {
        std::fs::write(dir.join(name), script).expect("stand-in program");
        let chmod = std::process::Command::new("chmod")
            .arg("+x")
            .arg(dir.join(name))
            .status();
        assert!(chmod.is_ok_and(|s| s.success()));
    }

    /// Runs `argv` with `dir`'s stand-ins first on PATH and `env` set (the test password variable
    /// only when `env` names it), writing `stdin` to its input; its output, once `dir` is removed.
    fn run_in(
        dir: &std::path::Path,
        argv: &[String],
        env: &[(&str, &str)],
        stdin: &str,
    ) -> std::process::Output {
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
            .env_remove("TEST_CH_PASSWORD")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("sh runs");
        {
            use std::io::Write;
            let mut input = child.stdin.take().expect("stdin");
            input.write_all(stdin.as_bytes()).expect("write stdin");
        }
        let out = child.wait_with_output().expect("the command finishes");
        let _ = std::fs::remove_dir_all(dir);
        out
    }

    /// A fresh directory of its own under the system's temporary one.
    fn scratch_dir(what: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "chs-{what}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    /// Runs the stop rendered for `ids` with a stand-in client that prints its stdin; its output.
    fn run_stop(ids: &[&str]) -> String {
        let dir = scratch_dir("stop");
        stand_in(&dir, "clickhouse-client", "#!/bin/sh\ncat\n");
        let script = "KILL QUERY WHERE query_id IN ('x') SYNC;\n";
        let argv = render_stop(&client(), ids, script.len(), Duration::from_secs(10));
        for id in ids.iter().filter(|id| id.len() > QUERY_ID_PREFIX.len()) {
            assert!(!argv[2].contains(id), "its own argv would match: {}", argv[2]);
        }
        let out = run_in(&dir, &argv, &[], script);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            stdout.ends_with(script),
            "the client ran after the pod part: {stdout}"
        );
        stdout[..stdout.len() - script.len()].to_owned()
    }

    #[test]
    fn the_stop_ends_in_the_pod_exactly_the_processes_that_carry_its_ids() {
        use std::os::unix::process::ExitStatusExt;
        // Stand-ins of statements' execs: the wrapper's `sh` carries `--query_id='<id>'` in its
        // script, the client `--query_id=<id>` as an argument of its own. Only chi-1's statement 3
        // is stopped; chi-10's (whose id the other's is a prefix of) and statement 4 run on.
        let stopped = "clickhouse-schema-0123456789abcdef-3-chi-1";
        let wrapper = |id: &str| {
            std::process::Command::new("sh")
                .args(["-c", &format!("sleep 60; : --query_id='{id}'")])
                .spawn()
                .expect("sh runs")
        };
        let client = |id: &str| {
            std::process::Command::new("sh")
                .args(["-c", "sleep 60; :", "client", &format!("--query_id={id}")])
                .spawn()
                .expect("sh runs")
        };
        let mut ended = [wrapper(stopped), client(stopped)];
        let mut spared = [
            wrapper("clickhouse-schema-0123456789abcdef-3-chi-10"),
            client("clickhouse-schema-0123456789abcdef-3-chi-10"),
            wrapper("clickhouse-schema-0123456789abcdef-4-chi-1"),
        ];
        assert_eq!(
            run_stop(&[stopped]),
            format!("{POD_ENDED_LABEL}\t2\n{POD_LEFT_LABEL}\t0\n"),
            "the pod's counts"
        );
        for child in &mut ended {
            let status = child.wait().expect("waits");
            assert_eq!(status.signal(), Some(9), "{status:?}");
        }
        for child in &mut spared {
            assert!(child.try_wait().expect("polls").is_none(), "another exec runs on");
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    #[test]
    fn the_stop_kills_what_is_started_after_its_first_round() {
        // A parent without the id (like the wrapper's `timeout`, whose argv does not carry it)
        // starts a process that carries it each time the last one dies, three in all: each
        // appears only after the round that killed its predecessor had listed the pod.
        let id = "clickhouse-schema-0123456789abcdef-5-chi-2";
        let dir = scratch_dir("respawn");
        let parent = dir.join("parent.sh");
        let one = format!("sh -c 'sleep 60' '--query_id={id}' || :\n");
        std::fs::write(&parent, one.repeat(3)).expect("parent script");
        let mut child = std::process::Command::new("sh")
            .arg(&parent)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sh runs");
        std::thread::sleep(Duration::from_millis(200));
        let counts = run_stop(&[id]);
        let status = child
            .wait()
            .expect("the parent ends once its last child is killed");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(status.success(), "{status:?}");
        assert_eq!(
            counts,
            format!("{POD_ENDED_LABEL}\t3\n{POD_LEFT_LABEL}\t0\n"),
            "each of the three is killed, none is left"
        );
    }

    #[test]
    fn a_stop_with_no_id_of_the_package_looks_at_no_process() {
        // No pattern is specific enough: an empty one would match every process of the pod.
        let unknown = format!("{POD_ENDED_LABEL}\t0\n{POD_LEFT_LABEL}\tunknown\n");
        assert_eq!(run_stop(&[]), unknown);
        assert_eq!(run_stop(&["clickhouse-schema-"]), unknown);
        assert_eq!(run_stop(&["somebody-else-3-chi-1"]), unknown);
    }

    #[test]
    fn a_statement_whose_input_ends_early_is_not_run() {
        // The exec's connection dropped after part of a long statement: what arrived parses as
        // another statement. The client must not start.
        let statement = "DROP TABLE IF EXISTS db.events_old";
        let (out, code) = run_rendered(
            None,
            "default",
            statement.len(),
            "DROP TABLE IF EXISTS db.events",
            &[],
        );
        assert_eq!(code, INPUT_CUT_EXIT_CODE, "{out}");
        assert_eq!(out, "", "the client never started");
        // Trailing newlines and non-ASCII text are counted as bytes, and kept.
        let statement = "SELECT 'ß€'\n\n";
        let (out, code) = run_with_fake_client(None, "default", statement);
        assert_eq!(code, 0, "{out}");
        assert!(out.ends_with(&format!("--\n{statement}")), "{out:?}");
    }

    #[test]
    fn hostile_values_stay_single_words() {
        let mut c = client();
        c.user = "o'brien; rm -rf /".into();
        c.database = "-$(reboot)`x`".into();
        let argv = render(&c, &BTreeMap::new(), 1, FIVE_MINUTES);
        assert!(argv[2].contains("--user='o'\\''brien; rm -rf /'"), "{}", argv[2]);
        assert!(argv[2].contains("--database='-$(reboot)`x`'"), "{}", argv[2]);
    }

    /// Runs the rendered script with a stand-in `clickhouse-client` that
    /// prints its argv (one word a line), then `--`, then the config file it
    /// was given, then `--`, then its stdin.
    fn run_with_fake_client(password: Option<&str>, user: &str, statement: &str) -> (String, i32) {
        run_with_fakes(password, user, statement, &[])
    }

    /// [`run_with_fake_client`] with more stand-in programs, `(name, sh script)`, first on PATH.
    fn run_with_fakes(
        password: Option<&str>,
        user: &str,
        statement: &str,
        programs: &[(&str, &str)],
    ) -> (String, i32) {
        // More than the statement: `head -c N` must stop at the statement.
        let input = format!("{statement}TRAILING");
        run_rendered(password, user, statement.len(), &input, programs)
    }

    /// The command rendered for a statement of `bytes` bytes, given `input` on stdin.
    fn run_rendered(
        password: Option<&str>,
        user: &str,
        bytes: usize,
        input: &str,
        programs: &[(&str, &str)],
    ) -> (String, i32) {
        let dir = scratch_dir("command");
        stand_in(
            &dir,
            "clickhouse-client",
            "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done; echo --; \
             for a in \"$@\"; do case \"$a\" in --config-file=*) cat \"${a#--config-file=}\";; esac; done; \
             echo --; cat\n",
        );
        for (name, script) in programs {
            stand_in(&dir, name, script);
        }
        let mut c = client();
        c.user = user.into();
        c.password_env = "TEST_CH_PASSWORD".into();
        let argv = render(&c, &BTreeMap::new(), bytes, FIVE_MINUTES);
        let env: Vec<(&str, &str)> = password.map(|p| ("TEST_CH_PASSWORD", p)).into_iter().collect();
        let out = run_in(&dir, &argv, &env, input);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.status.code().unwrap_or(-1),
        )
    }

    #[test]
    fn the_password_reaches_the_client_in_its_config_file_never_in_argv() {
        let password = "-starts-with-dash <&> 'q' \"dq\" $HOME `x` \\ end";
        let (out, code) = run_with_fake_client(Some(password), "-u", "SELECT 1");
        assert_eq!(code, 0, "{out}");
        let mut parts = out.split("--\n");
        let argv = parts.next().expect("argv");
        let config = parts.next().expect("config");
        let stdin = parts.next().expect("stdin");
        assert!(
            !argv.contains("starts-with-dash"),
            "argv holds the password: {argv}"
        );
        assert!(argv.lines().any(|a| a == "--user=-u"), "{argv}");
        assert!(argv.lines().any(|a| a == "--config-file=/dev/fd/4"), "{argv}");
        assert_eq!(
            config,
            "<?xml version=\"1.0\"?><yandex><password>-starts-with-dash &lt;&amp;&gt; 'q' \"dq\" $HOME `x` \\ \
             end</password></yandex>\n"
        );
        assert_eq!(stdin, "SELECT 1", "exactly the statement's bytes");
    }

    #[test]
    fn the_client_is_told_the_local_server_whatever_the_environment_names() {
        // A current client reads CLICKHOUSE_HOST when argv names no host; the exec's environment
        // is the container's, so the command must name the server itself.
        let (out, code) = run_with_fakes(None, "default", "SELECT 1", &[]);
        assert_eq!(code, 0, "{out}");
        let argv = out.split("--\n").next().expect("argv");
        assert!(argv.lines().any(|a| a == "--host=localhost"), "{argv}");
    }

    #[test]
    fn a_busybox_timeout_without_kill_after_still_bounds_the_client() {
        // BusyBox 1.30-1.34: `timeout [-s SIG] SECS PROG ARGS`, and `-k` is refused with its usage.
        let busybox = "#!/bin/sh\n\
             case \"$1\" in -k*) echo \"timeout: invalid option -- 'k'\" >&2; \
             echo 'BusyBox v1.34.1 multi-call binary. Usage: timeout [-s SIG] SECS PROG ARGS' >&2; exit 1;; esac\n\
             secs=$1; shift; [ \"$1\" = clickhouse-client ] && printf 'timeout %s\\n' \"$secs\"; exec \"$@\"\n";
        let (out, code) = run_with_fakes(None, "default", "SELECT 3", &[("timeout", busybox)]);
        assert_eq!(code, 0, "{out}");
        assert!(out.starts_with("timeout 303\n--config-file=/dev/fd/4\n"), "{out}");
        assert!(out.ends_with("--\nSELECT 3"), "{out}");
    }

    #[test]
    fn a_statement_read_that_never_completes_is_bounded_in_the_pod() {
        // The input stays open short of the statement's size: the read is under the pod-side
        // bound like the client, so the exec ends (nothing run) instead of waiting in the pod.
        let dir = scratch_dir("stalled");
        let fake = dir.join("clickhouse-client");
        std::fs::write(&fake, "#!/bin/sh\necho ran\n").expect("fake client");
        let chmod = std::process::Command::new("chmod").arg("+x").arg(&fake).status();
        assert!(chmod.is_ok_and(|s| s.success()));
        let argv = render(&client(), &BTreeMap::new(), 100, Duration::from_secs(1));
        let mut child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sh runs");
        let mut stdin = child.stdin.take().expect("stdin");
        {
            use std::io::Write;
            stdin.write_all(b"SELECT 1").expect("write stdin");
        }
        // stdin is held open (not dropped) until the exec has ended by itself.
        let out = child
            .wait_with_output()
            .expect("the exec ends with its input still open");
        drop(stdin);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(out.status.code(), Some(INPUT_CUT_EXIT_CODE), "{out:?}");
        assert!(out.stdout.is_empty(), "the client never started: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        // `head` holds what it read until it has all of it, so the bound leaves none of it.
        assert!(stderr.contains("input ended after 0 of 100 bytes"), "{stderr}");
    }

    #[test]
    fn an_image_without_timeout_runs_the_client_unbounded_in_the_pod() {
        // A `timeout` that takes no form at all stands for none: sh finds no program either way.
        let none = "#!/bin/sh\necho 'timeout: not found' >&2; exit 127\n";
        let (out, code) = run_with_fakes(None, "default", "SELECT 4", &[("timeout", none)]);
        assert_eq!(code, 0, "{out}");
        assert!(out.starts_with("--config-file=/dev/fd/4\n"), "{out}");
        assert!(out.ends_with("--\nSELECT 4"), "{out}");
    }

    #[test]
    fn an_unset_password_variable_is_the_empty_password() {
        let (out, code) = run_with_fake_client(None, "default", "SELECT 2");
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("<yandex><password></password></yandex>"), "{out}");
    }

    #[test]
    fn shell_quote_round_trips_through_sh() {
        // The quoting is only right if a real shell reads back the original word.
        for value in [
            "plain",
            "",
            "it's",
            "a'b'c",
            "$HOME",
            "back\\slash",
            "new\nline",
            "''",
        ] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", shell_quote(value)))
                .output()
                .expect("sh runs");
            assert_eq!(String::from_utf8_lossy(&out.stdout), value);
        }
    }
}
