//! Telling h2c (prior knowledge) from HTTP/1.1 by the connection's first bytes, without polling.
//!
//! Nearly every client sends its first bytes in one segment, so a peek decides at once and leaves
//! them for hyper. A client that sends part of the HTTP/2 preface and then pauses (a slowloris, or
//! a slow link) cannot be waited for by peeking: a peek returns the same bytes at once, so waiting
//! would mean a timer loop (it cost 62 % of a core for 2,000 such clients). Those bytes are read
//! instead, so the next wait is on the socket's readiness, and [`Opened`] hands them to hyper
//! before the rest of the stream.

use bytes::Bytes;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The HTTP/2 connection preface (RFC 9113 §3.4).
pub(super) const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How many bytes a connection's opening is peeked at: the preface, or most HTTP/1 request lines
/// whole (one that does not end within them is left to hyper).
const PEEKED: usize = 128;

/// Reads how `stream` opens: whether with the HTTP/2 preface, and the stream with any bytes read
/// to tell put back in front. An error when the client leaves or fails before showing it, or when
/// it opens with a line that is neither the preface nor an HTTP/1 request line: an invalid
/// preface, which closes the connection (RFC 9113 §3.4) instead of drawing an HTTP/1 400.
pub(super) async fn open(mut stream: TcpStream) -> io::Result<(bool, Opened)> {
    let mut peeked = [0u8; PEEKED];
    let n = stream.peek(&mut peeked).await?;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let mut read = [0u8; 24];
    let head = n.min(read.len());
    read[..head].copy_from_slice(&peeked[..head]);
    let h2c = read == *H2_PREFACE;
    if h2c || read[..head] != H2_PREFACE[..head] {
        if !h2c && !http1_line(&peeked[..n]) {
            return Err(refuse(stream).await);
        }
        return Ok((h2c, Opened { unread: Bytes::new(), stream }));
    }
    // Part of the preface: read up to its length (never a byte past it) until it is whole or
    // wrong.
    let mut len = 0;
    loop {
        let n = stream.read(&mut read[len..]).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        len += n;
        let h2c = len == H2_PREFACE.len() && read == *H2_PREFACE;
        if h2c || read[..len] != H2_PREFACE[..len] {
            if !h2c && !http1_line(&read[..len]) {
                return Err(refuse(stream).await);
            }
            return Ok((h2c, Opened { unread: Bytes::copy_from_slice(&read[..len]), stream }));
        }
    }
}

/// Whether `opening` (a connection's first bytes, not the HTTP/2 preface) may be an HTTP/1
/// request: its first line is not whole yet, or it ends with an HTTP version (`GET / HTTP/1.1`;
/// hyper answers a malformed one 400). Any other line is no HTTP/1 request at all.
fn http1_line(opening: &[u8]) -> bool {
    // Empty lines before a request line are ignored (RFC 9112 §2.2).
    let start = opening.iter().position(|b| !matches!(b, b'\r' | b'\n')).unwrap_or(opening.len());
    let opening = &opening[start..];
    let Some(end) = opening.iter().position(|b| *b == b'\n') else { return true };
    let line = opening[..end].strip_suffix(b"\r").unwrap_or(&opening[..end]);
    let version = line.rsplit(|b| *b == b' ').next().unwrap_or_default();
    version.starts_with(b"HTTP/1.")
}

/// Closes a connection that opened with neither HTTP/1 nor the HTTP/2 preface, with a FIN: the
/// bytes it sent are read first (at most 64 KiB of them, without waiting), since closing a socket
/// with unread bytes resets it, and a reset may be read as a network failure rather than an answer.
async fn refuse(mut stream: TcpStream) -> io::Error {
    // In a scope of its own, the sink is gone before the await: no connection's task keeps room
    // for it.
    {
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            if !matches!(stream.try_read(&mut sink), Ok(n) if n > 0) {
                break;
            }
        }
    }
    let _ = tokio::io::AsyncWriteExt::shutdown(&mut stream).await;
    io::Error::new(io::ErrorKind::InvalidData, "neither an HTTP/1 request nor the HTTP/2 preface")
}

/// A client's stream, with bytes read from it but not consumed (by [`open`], or by a parked
/// connection's hyper) served first.
pub(super) struct Opened {
    unread: Bytes,
    stream: TcpStream,
}

impl Opened {
    /// Waits until there is something to read: unread bytes, or the socket's.
    pub(super) async fn readable(&self) -> io::Result<()> {
        if self.unread.is_empty() {
            self.stream.readable().await?;
        }
        Ok(())
    }

    /// Puts `bytes` back in front of the stream: those a parked connection's hyper had read,
    /// which by then had read every byte held here. They are copied: they are a view of hyper's
    /// whole read buffer, which would stay allocated as long as they do.
    pub(super) fn unread(&mut self, bytes: &[u8]) {
        debug_assert!(self.unread.is_empty(), "bytes put back before the held ones were read");
        self.unread = Bytes::copy_from_slice(bytes);
    }
}

impl AsyncRead for Opened {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.unread.is_empty() {
            let n = self.unread.len().min(buf.remaining());
            buf.put_slice(&self.unread.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Opened {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::{poll_fn, Future};
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        (client, listener.accept().await.unwrap().0)
    }

    /// Opens `server` while `client` sends `first`, pauses 100 ms, then sends `rest`; returns
    /// whether it was h2c, what the opened stream then reads, and how often `open` was polled.
    async fn open_split(first: &[u8], rest: &[u8]) -> (bool, Vec<u8>, usize) {
        let (mut client, server) = pair().await;
        client.write_all(first).await.unwrap();
        let mut polls = 0;
        let mut opening = std::pin::pin!(open(server));
        let counted = poll_fn(|cx| {
            polls += 1;
            opening.as_mut().poll(cx)
        });
        let send_rest = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            client.write_all(rest).await.unwrap();
            client.shutdown().await.unwrap();
        };
        let (opened, ()) = tokio::join!(counted, send_rest);
        let (h2c, mut opened) = opened.unwrap();
        let mut bytes = Vec::new();
        opened.read_to_end(&mut bytes).await.unwrap();
        (h2c, bytes, polls)
    }

    #[tokio::test]
    async fn a_split_preface_is_waited_for_on_the_socket_and_handed_back_whole() {
        let (h2c, bytes, polls) = open_split(&H2_PREFACE[..10], &[&H2_PREFACE[10..], b"frames"].concat()).await;
        assert!(h2c);
        assert_eq!(bytes, [&H2_PREFACE[..], b"frames"].concat());
        // A timer loop would have been polled about every millisecond of the 100 ms pause.
        assert!(polls <= 4, "polled {polls} times while the client paused");
    }

    #[tokio::test]
    async fn a_request_that_starts_like_the_preface_is_http1_with_every_byte() {
        let (h2c, bytes, _) = open_split(b"P", b"OST / HTTP/1.1\r\n\r\n").await;
        assert!(!h2c);
        assert_eq!(bytes, b"POST / HTTP/1.1\r\n\r\n");
    }

    #[tokio::test]
    async fn whole_openings_are_decided_by_a_peek_and_left_unread() {
        let (h2c, bytes, polls) = open_split(&H2_PREFACE[..], b"").await;
        assert!(h2c && bytes == H2_PREFACE && polls <= 2);
        // A head as long as the preface or longer: the peek sees all 24 bytes, and they differ.
        let head = b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n";
        let (h2c, bytes, _) = open_split(head, b"").await;
        assert!(!h2c);
        assert_eq!(bytes, head);
    }

    #[tokio::test]
    async fn a_line_that_is_neither_http1_nor_the_preface_is_an_error() {
        let (mut client, server) = pair().await;
        client.write_all(b"INVALID CONNECTION PREFACE\r\n\r\n").await.unwrap();
        assert_eq!(open(server).await.err().map(|e| e.kind()), Some(io::ErrorKind::InvalidData));
        // Closed with a FIN, not reset: the client reads the stream's end.
        let mut rest = Vec::new();
        assert_eq!(client.read_to_end(&mut rest).await.unwrap(), 0);
        // A malformed HTTP/1 request line is still HTTP/1 (hyper answers it 400), and so is a
        // line not yet whole.
        for opening in [&b"GET /\x01 HTTP/1.1\r\n\r\n"[..], b"GET /a-long-path-still-coming"] {
            let (h2c, bytes, _) = open_split(opening, b"").await;
            assert!(!h2c && bytes == opening);
        }
        assert!(http1_line(b"GET / HTTP/1.0\n") && http1_line(b"\r\nGET / HTTP/1.1\r\n") && http1_line(b"\r\n"));
        assert!(!http1_line(b"GET /\r\n") && !http1_line(b"GET / HTTP/2.0\r\n"));
        // The preface's own line, then something else: an HTTP/2 client's broken preface.
        let (mut client, server) = pair().await;
        client.write_all(&H2_PREFACE[..10]).await.unwrap();
        let opening = tokio::spawn(open(server));
        tokio::time::sleep(Duration::from_millis(50)).await;
        client.write_all(b"P/2.0\r\n\r\nXX").await.unwrap();
        assert_eq!(opening.await.unwrap().err().map(|e| e.kind()), Some(io::ErrorKind::InvalidData));
    }

    #[tokio::test]
    async fn a_client_that_leaves_mid_preface_is_an_error() {
        let (mut client, server) = pair().await;
        client.write_all(&H2_PREFACE[..5]).await.unwrap();
        drop(client);
        assert!(open(server).await.is_err());
    }
}
