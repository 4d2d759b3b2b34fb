//! HTTPS accept loop: rustls (ring) in front of hyper's HTTP/1.1 with upgrades, serving the axum
//! router. Upgrades must stay enabled or exec's WebSocket never gets its connection.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Server {
    pub(crate) fn start(
        listener: TcpListener,
        tls: Arc<ServerConfig>,
        app: Router,
    ) -> std::io::Result<Server> {
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let acceptor = TlsAcceptor::from(tls);
        let task = tokio::spawn(async move {
            let mut stop_accept = stopped.clone();
            loop {
                let (tcp, _) = tokio::select! {
                    r = listener.accept() => match r {
                        Ok(c) => c,
                        Err(_) => continue,
                    },
                    _ = stop_accept.changed() => break,
                };
                let acceptor = acceptor.clone();
                let app = app.clone();
                let mut stop_conn = stopped.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                        .with_upgrades();
                    tokio::select! {
                        _ = conn => {}
                        _ = stop_conn.changed() => {}
                    }
                });
            }
        });
        Ok(Server { addr, stop, task })
    }

    pub(crate) fn stop(&self) {
        let _ = self.stop.send(true);
        self.task.abort();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
