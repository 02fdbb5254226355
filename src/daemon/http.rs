//! A small HTTP/1.1 server for the local API, on smol's executor: one task
//! per connection, one request per connection (`Connection: close`), a
//! limit on everything (head and body size, time to read a request and to
//! write the answer, connections at once). Routes are added to a [`Router`]
//! by the modules that own them (`/health` and `/status` in `status.rs`;
//! `/metrics` and `/reload` can join the same way).
//!
//! Handlers run on the executor's threads, never on a pipeline worker, and
//! must not block: anything slow belongs on its own thread, awaited here.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::{TcpListener, TcpStream};

/// What a handler returns: a response, possibly after awaiting.
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = Response> + Send>>;
type Handler = Arc<dyn Fn(Request) -> BoxFuture + Send + Sync>;

/// Bounds that keep a slow or hostile client from holding resources.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    /// Request line and headers together.
    pub(crate) max_head_bytes: usize,
    /// A larger `Content-Length` is answered 413 without reading it.
    pub(crate) max_body_bytes: usize,
    /// Time for the whole request to arrive.
    pub(crate) read_timeout: Duration,
    /// Time for the whole response to leave.
    pub(crate) write_timeout: Duration,
    /// Connections served at once; more are closed at once.
    pub(crate) max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_head_bytes: 8 << 10,
            max_body_bytes: 64 << 10,
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
            max_connections: 64,
        }
    }
}

/// A parsed request.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    /// The path without the query string.
    pub(crate) path: String,
    #[allow(dead_code)] // for handlers that take parameters (`/metrics?name=`)
    pub(crate) query: Option<String>,
    /// Header names in lower case.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) peer: SocketAddr,
}

impl Request {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A response; the server adds `Content-Length`, `Connection: close` and
/// `Cache-Control: no-store`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
}

impl Response {
    /// A `text/plain` response; a newline is added.
    pub(crate) fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: format!("{body}\n").into_bytes(),
        }
    }

    pub(crate) fn json(status: u16, value: &impl serde::Serialize) -> Response {
        match serde_json::to_vec_pretty(value) {
            Ok(mut body) => {
                body.push(b'\n');
                Response {
                    status,
                    content_type: "application/json",
                    headers: Vec::new(),
                    body,
                }
            }
            Err(e) => Response::text(500, &format!("cannot encode the answer: {e}")),
        }
    }

    fn encode(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        if !head_only {
            bytes.extend_from_slice(&self.body);
        }
        bytes
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        415 => "Unsupported Media Type",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// Method and path to handler. A path that exists with other methods
/// answers 405 with `Allow`; an unknown path 404. `HEAD` is served by the
/// `GET` handler without the body.
#[derive(Clone, Default)]
pub(crate) struct Router {
    routes: Vec<(&'static str, &'static str, Handler)>,
}

impl Router {
    pub(crate) fn new() -> Router {
        Router::default()
    }

    /// Adds a handler that answers at once (it must not block).
    pub(crate) fn get(
        self,
        path: &'static str,
        f: impl Fn(&Request) -> Response + Send + Sync + 'static,
    ) -> Router {
        self.route("GET", path, move |r| {
            let response = f(&r);
            Box::pin(async move { response })
        })
    }

    /// Adds a handler for `method` and `path` that may await.
    pub(crate) fn route(
        mut self,
        method: &'static str,
        path: &'static str,
        f: impl Fn(Request) -> BoxFuture + Send + Sync + 'static,
    ) -> Router {
        self.routes.push((method, path, Arc::new(f)));
        self
    }

    /// The response to `request`.
    pub(crate) async fn handle(&self, request: Request) -> Response {
        let method = if request.method == "HEAD" {
            "GET"
        } else {
            request.method.as_str()
        };
        let found = self
            .routes
            .iter()
            .find(|(m, p, _)| *m == method && *p == request.path)
            .map(|(_, _, h)| h.clone());
        if let Some(h) = found {
            return h(request).await;
        }
        let mut allowed: Vec<&str> = self
            .routes
            .iter()
            .filter(|(_, p, _)| *p == request.path)
            .map(|(m, _, _)| *m)
            .collect();
        if allowed.is_empty() {
            return Response::text(404, &format!("no such resource: {}", request.path));
        }
        if allowed.contains(&"GET") {
            allowed.push("HEAD");
        }
        let allow = allowed.join(", ");
        let mut r = Response::text(
            405,
            &format!("{} {}: allowed: {allow}", request.method, request.path),
        );
        r.headers.push(("Allow", allow));
        r
    }
}

/// A running server. Dropping it stops accepting; requests in flight end
/// within the limits' timeouts.
pub(crate) struct HttpServer {
    local: SocketAddr,
    _accept: smol::Task<()>,
}

impl HttpServer {
    /// Binds `addr` now (so "address in use" is an error of the caller's
    /// start, not a log line later) and serves on smol's executor.
    pub(crate) fn bind(addr: SocketAddr, router: Router, limits: Limits) -> io::Result<HttpServer> {
        let std_listener = std::net::TcpListener::bind(addr)?;
        let local = std_listener.local_addr()?;
        let listener = TcpListener::try_from(std_listener)?;
        let accept = smol::spawn(accept_loop(listener, Arc::new(router), limits));
        Ok(HttpServer {
            local,
            _accept: accept,
        })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

async fn accept_loop(listener: TcpListener, router: Arc<Router>, limits: Limits) {
    let permits = Arc::new(smol::lock::Semaphore::new(limits.max_connections));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: wait, then go on.
                tracing::warn!("local API: accept failed: {e}");
                smol::Timer::after(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(permit) = permits.try_acquire_arc() else {
            tracing::debug!(%peer, "local API: too many connections; closing this one");
            continue;
        };
        let router = router.clone();
        let limits = limits.clone();
        smol::spawn(async move {
            serve(stream, peer, &router, &limits).await;
            drop(permit);
        })
        .detach();
    }
}

/// Serves one request on `stream`, then closes it.
async fn serve(mut stream: TcpStream, peer: SocketAddr, router: &Router, limits: &Limits) {
    let read = read_request(&mut stream, peer, limits);
    let (response, head_only) = match with_timeout(limits.read_timeout, read).await {
        None => (Response::text(408, "the request took too long"), false),
        Some(Err(r)) => (r, false),
        Some(Ok(request)) => {
            let head_only = request.method == "HEAD";
            let (method, path, from) = (request.method.clone(), request.path.clone(), request.peer);
            let response = router.handle(request).await;
            tracing::debug!(peer = %from, "local API: {method} {path} -> {}", response.status);
            (response, head_only)
        }
    };
    let bytes = response.encode(head_only);
    let write = async {
        stream.write_all(&bytes).await?;
        stream.flush().await
    };
    match with_timeout(limits.write_timeout, write).await {
        Some(Ok(())) => {}
        Some(Err(e)) => tracing::debug!(%peer, "local API: writing the answer: {e}"),
        None => tracing::debug!(%peer, "local API: the client did not read the answer in time"),
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Reads one request, or the error response to send instead.
async fn read_request(
    stream: &mut TcpStream,
    peer: SocketAddr,
    limits: &Limits,
) -> Result<Request, Response> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > limits.max_head_bytes {
            return Err(Response::text(
                431,
                &format!("the request head is over {} bytes", limits.max_head_bytes),
            ));
        }
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| Response::text(400, &format!("reading the request: {e}")))?;
        if n == 0 {
            return Err(Response::text(400, "the request ended before its head"));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if head_end > limits.max_head_bytes {
        return Err(Response::text(
            431,
            &format!("the request head is over {} bytes", limits.max_head_bytes),
        ));
    }
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| Response::text(400, "the request head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Response::text(400, "malformed request line"));
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(Response::text(505, "only HTTP/1.0 and HTTP/1.1 are served"));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(Response::text(400, "malformed method"));
    }
    let mut headers = Vec::new();
    for l in lines {
        let Some((name, value)) = l.split_once(':') else {
            return Err(Response::text(400, "malformed header line"));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), Some(q.to_string())),
        None => (target.to_string(), None),
    };
    let mut request = Request {
        method: method.to_string(),
        path,
        query,
        headers,
        body: Vec::new(),
        peer,
    };
    if request.header("transfer-encoding").is_some() {
        return Err(Response::text(
            501,
            "chunked request bodies are not served; send Content-Length",
        ));
    }
    let length = match request.header("content-length") {
        None => 0,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| Response::text(400, "malformed Content-Length"))?,
    };
    if length > limits.max_body_bytes {
        return Err(Response::text(
            413,
            &format!("the body is over {} bytes", limits.max_body_bytes),
        ));
    }
    let mut body = buf[head_end + 4..].to_vec();
    body.truncate(length);
    // curl and others wait up to a second for this before a large body.
    if body.len() < length
        && request
            .header("expect")
            .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        stream
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .map_err(|e| Response::text(400, &format!("writing 100 Continue: {e}")))?;
    }
    // Ingest bodies can be megabytes: read them in large pieces.
    let mut chunk = vec![0u8; (length - body.len()).clamp(1, 64 << 10)];
    while body.len() < length {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| Response::text(400, &format!("reading the body: {e}")))?;
        if n == 0 {
            return Err(Response::text(400, "the body ended early"));
        }
        let want = (length - body.len()).min(n);
        body.extend_from_slice(&chunk[..want]);
    }
    request.body = body;
    Ok(request)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn with_timeout<T>(d: Duration, f: impl Future<Output = T>) -> Option<T> {
    smol::future::or(async { Some(f.await) }, async {
        smol::Timer::after(d).await;
        None
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn server(limits: Limits) -> HttpServer {
        let router = Router::new()
            .get("/hello", |_| Response::text(200, "hi"))
            .route("POST", "/echo", |r| {
                Box::pin(async move { Response::text(200, &String::from_utf8_lossy(&r.body)) })
            });
        HttpServer::bind("127.0.0.1:0".parse().expect("addr"), router, limits).expect("bind")
    }

    /// Sends `raw` and returns the whole answer.
    fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let _ = s.write_all(raw);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn routes_methods_and_limits() {
        let srv = server(Limits {
            read_timeout: Duration::from_millis(300),
            ..Limits::default()
        });
        let a = srv.local_addr();
        let ok = exchange(a, b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains("Content-Length: 3\r\n") && ok.ends_with("\r\n\r\nhi\n"),
            "{ok}"
        );
        let head = exchange(a, b"HEAD /hello HTTP/1.1\r\n\r\n");
        assert!(
            head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        let nf = exchange(a, b"GET /nope?x=1 HTTP/1.1\r\n\r\n");
        assert!(nf.starts_with("HTTP/1.1 404"), "{nf}");
        let na = exchange(a, b"DELETE /hello HTTP/1.1\r\n\r\n");
        assert!(
            na.starts_with("HTTP/1.1 405") && na.contains("Allow: GET, HEAD\r\n"),
            "{na}"
        );
        let echo = exchange(a, b"POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcde");
        assert!(echo.ends_with("\r\n\r\nabcde\n"), "{echo}");
        let big = exchange(a, b"POST /echo HTTP/1.1\r\nContent-Length: 9999999\r\n\r\n");
        assert!(big.starts_with("HTTP/1.1 413"), "{big}");
        let mut huge = b"GET /hello HTTP/1.1\r\nX: ".to_vec();
        huge.extend(std::iter::repeat_n(b'a', 20_000));
        let h = exchange(a, &huge);
        assert!(h.starts_with("HTTP/1.1 431"), "{h}");
        let bad = exchange(a, b"hello\r\n\r\n");
        assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
        let v2 = exchange(a, b"GET /hello HTTP/2.0\r\n\r\n");
        assert!(v2.starts_with("HTTP/1.1 505"), "{v2}");
        // A client that never finishes its request is cut off.
        let t = std::time::Instant::now();
        let slow = exchange(a, b"GET /hello HTTP/1.1\r\n");
        assert!(slow.starts_with("HTTP/1.1 408"), "{slow}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn an_address_in_use_is_an_error_at_bind() {
        let srv = server(Limits::default());
        let e = HttpServer::bind(srv.local_addr(), Router::new(), Limits::default())
            .err()
            .expect("in use");
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    }

    #[test]
    fn connections_beyond_the_limit_are_closed() {
        let srv = server(Limits {
            max_connections: 1,
            read_timeout: Duration::from_secs(2),
            ..Limits::default()
        });
        let a = srv.local_addr();
        // The first holds its slot by sending nothing.
        let _idle = std::net::TcpStream::connect(a).expect("connect");
        std::thread::sleep(Duration::from_millis(100));
        let second = exchange(a, b"GET /hello HTTP/1.1\r\n\r\n");
        assert!(second.is_empty(), "{second}");
    }
}
