//! A request its client abandons stops `tailguard serve`'s work, over real sockets on 127.0.0.1
//! (port 0): one worker, 1 s of work; a first request is abandoned after 100 ms, by closing its
//! HTTP/1 connection or resetting its HTTP/2 stream; a second one sent then must get the worker
//! at once and answer after about one work time, not after the rest of the first one's too.
//! Also the cancel travelling down: an abandoned request drops its own downstream call.

use crate::common::{client, get, start};
use bytes::Bytes;
use http_body_util::Empty;
use hyper::StatusCode;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

const MS: Duration = Duration::from_millis(1);
/// The work time of the services below.
const WORK: Duration = Duration::from_secs(1);
/// A second request answered before this did not wait for the abandoned one's work (which
/// would take it to 1.9 s at least).
const ONE_WORK_AT_MOST: Duration = Duration::from_millis(1600);

const ONE_WORKER: &str = "  a: { workers: 1, service_time: { dist: constant, value: 1s } }";

/// Sends a GET for `/` on a connection of its own and closes it after `after`, unanswered.
async fn abandon_http1(addr: SocketAddr, after: Duration) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connects");
    stream.write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n").await.expect("sends");
    tokio::time::sleep(after).await;
    let mut byte = [0u8; 1];
    let unanswered = matches!(stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    assert!(unanswered, "the first request was answered, or its connection closed, within {after:?}");
    drop(stream);
}

/// Sends a GET through `client` and drops it after `after`, unanswered (over HTTP/2 hyper resets
/// the stream).
async fn abandon(client: &Client<HttpConnector, Empty<Bytes>>, addr: SocketAddr, after: Duration) {
    let uri = format!("http://{addr}/").parse().expect("a URI");
    let answer = tokio::time::timeout(after, client.get(uri)).await;
    assert!(answer.is_err(), "the first request was answered within {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_an_http1_connection_frees_the_worker() {
    let server = start(ONE_WORKER, "a", &[]).await;
    // Step: the first request takes the worker; its client hangs up after 100 ms.
    abandon_http1(server.addr(), 100 * MS).await;
    // Step: the next request gets the worker at once: one work time.
    let (status, took) = get(&client(false), server.addr(), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(took >= WORK && took < ONE_WORK_AT_MOST, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resetting_an_http2_stream_frees_the_worker() {
    let server = start(ONE_WORKER, "a", &[]).await;
    let client = client(true);
    // Step: the first request takes the worker; its stream is reset after 100 ms, on a
    // connection that stays open.
    abandon(&client, server.addr(), 100 * MS).await;
    // Step: the next request, on the same connection, gets the worker at once.
    let (status, took) = get(&client, server.addr(), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(took >= WORK && took < ONE_WORK_AT_MOST, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_request_drops_its_downstream_call() {
    // a (no work) calls b (one worker, 1 s of work).
    let b = start(
        "  a: { calls: [{ service: b }] }\n  b: { workers: 1, service_time: { dist: constant, value: 1s } }",
        "b",
        &[],
    )
    .await;
    let b_url = format!("http://{}/", b.addr());
    let a = start("  a: { calls: [{ service: b }] }\n  b: { workers: 1 }", "a", &[("b", b_url)]).await;
    // Step: a request to a, whose call holds b's worker, is abandoned after 100 ms.
    abandon_http1(a.addr(), 100 * MS).await;
    // Step: b's worker is free at once for a request straight to b.
    let (status, took) = get(&client(false), b.addr(), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(took >= WORK && took < ONE_WORK_AT_MOST, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_is_not_cancellable_works_on() {
    let server =
        start("  a: { workers: 1, service_time: { dist: constant, value: 1s }, cancellable: false }", "a", &[]).await;
    // Step: the first request takes the worker; its client hangs up after 100 ms.
    abandon_http1(server.addr(), 100 * MS).await;
    // Step: the worker finishes the abandoned request's second first: the next waits for it.
    let (status, took) = get(&client(false), server.addr(), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(took >= 2 * WORK - 150 * MS, "took {took:?}");
}
