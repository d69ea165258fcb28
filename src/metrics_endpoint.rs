//! The `/metrics` HTTP endpoint: its own thread, never a worker's ring, so
//! a slow scraper cannot stall the data path.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use metrics::Metrics;

/// Errors from starting the metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The listen address could not be bound (in use, no permission, not a
    /// local address, ...). Carries the address so start-up logs are
    /// actionable.
    #[error("cannot bind metrics endpoint on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The serving thread could not be spawned.
    #[error("cannot spawn the metrics thread: {0}")]
    Spawn(#[source] std::io::Error),
}

/// Binds `addr` and serves `GET /metrics` on a dedicated thread named
/// [`metrics::THREAD_NAME`], never on a worker's ring: a slow scraper must not be able
/// to stall the data path.
///
/// Binding happens before this returns so a bad or busy address fails
/// start-up with the address in the error, instead of surfacing later on a
/// background thread. Returns the actually bound address (useful with port
/// 0) and the thread handle; the thread runs for the life of the process.
pub fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> Result<(SocketAddr, JoinHandle<()>), MetricsError> {
    let server =
        tiny_http::Server::http(addr).map_err(|source| MetricsError::Bind { addr, source })?;
    let bound = server.server_addr().to_ip().unwrap_or(addr);
    let handle = std::thread::Builder::new()
        .name(metrics::THREAD_NAME.to_string())
        .spawn(move || serve_loop(&server, &metrics))
        .map_err(MetricsError::Spawn)?;
    tracing::info!(addr = %bound, "metrics endpoint listening");
    Ok((bound, handle))
}

fn serve_loop(server: &tiny_http::Server, metrics: &Metrics) {
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("");
        let method = request.method().clone();
        let response = match (&method, path) {
            (tiny_http::Method::Get | tiny_http::Method::Head, "/metrics") => with_content_type(
                tiny_http::Response::from_string(metrics.render()),
                metrics::CONTENT_TYPE,
            ),
            (_, "/metrics") => with_content_type(
                tiny_http::Response::from_string("method not allowed\n").with_status_code(405),
                "text/plain; charset=utf-8",
            ),
            _ => with_content_type(
                tiny_http::Response::from_string("not found; try /metrics\n").with_status_code(404),
                "text/plain; charset=utf-8",
            ),
        };
        // A scraper that hangs up mid-response is its problem, not ours.
        if let Err(e) = request.respond(response) {
            tracing::debug!(error = %e, "metrics response not delivered");
        }
    }
}

fn with_content_type<R: std::io::Read>(
    response: tiny_http::Response<R>,
    value: &str,
) -> tiny_http::Response<R> {
    match tiny_http::Header::from_bytes(&b"Content-Type"[..], value.as_bytes()) {
        Ok(h) => response.with_header(h),
        // Only constant ASCII values are passed; unreachable in practice.
        Err(()) => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics::BufferMode;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    fn http_get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        resp
    }

    #[test]
    fn serve_answers_real_http() {
        let m = Metrics::new(1, BufferMode::Fixed);
        m.worker(0).commands_total.fetch_add(154, Ordering::Relaxed);
        let (addr, handle) = serve("127.0.0.1:0".parse().unwrap(), Arc::clone(&m)).unwrap();
        assert_ne!(addr.port(), 0);
        assert_eq!(handle.thread().name(), Some(metrics::THREAD_NAME));

        let resp = http_get(addr, "/metrics");
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        assert!(
            resp.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{resp}"
        );
        let body = &resp[resp.find("\r\n\r\n").unwrap() + 4..];
        assert!(body.contains("\nringgate_commands_total 154\n"), "{body}");

        // Live values: the next scrape sees new counts.
        m.worker(0).commands_total.fetch_add(1, Ordering::Relaxed);
        let resp = http_get(addr, "/metrics?x=1");
        assert!(resp.contains("\nringgate_commands_total 155\n"), "{resp}");

        let resp = http_get(addr, "/");
        assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
    }

    #[test]
    fn serve_reports_bind_failure_with_address() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let err = serve(addr, Metrics::new(1, BufferMode::Fixed)).unwrap_err();
        assert!(matches!(err, MetricsError::Bind { .. }));
        assert!(err.to_string().contains(&addr.to_string()), "{err}");
    }
}
