//! `tollgate gateway` streams bodies both ways without buffering them:
//! a 1 GiB upload and a 1 GiB download pass while the gateway's peak
//! resident memory stays within a small bound, and a first chunk crosses
//! the gateway while the sender still holds back the rest.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/upstream.rs"]
mod upstream;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;

use gateway::{client, data, get, text, Gateway, TRANSFER};
use upstream::{Event, TestBody, Upstream, CHUNK, PATIENCE};

/// The size of the large bodies.
const LARGE: u64 = 1 << 30;

/// How much the gateway's peak resident memory may grow while moving a
/// large body: far less than the body, so the body was not held.
const GROWTH: u64 = 64 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gigabyte_each_way_passes_in_flat_memory() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url()]);
    // Warm up both routes, so pools and buffers exist before measuring.
    let warm = client()
        .request(get(&gw.url(&format!("/download?bytes={}", 4 * CHUNK))))
        .await
        .unwrap();
    assert_eq!(text(warm).await.len(), 4 * CHUNK);
    let upload = Request::post(gw.url("/upload"))
        .body(TestBody::repeat(4 * CHUNK as u64))
        .unwrap();
    let warm = client().request(upload).await.unwrap();
    assert!(matches!(upstream.next_event().await, Event::FirstChunk(_)));
    let _ = text(warm).await;
    let (_, peak_before) = gw.memory();

    // Download: count the bytes, keep none.
    let response = client()
        .request(get(&gw.url(&format!("/download?bytes={LARGE}"))))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let mut received = 0u64;
    let counted = tokio::time::timeout(TRANSFER, async {
        while let Some(frame) = body.frame().await {
            received += data(frame.unwrap()).len() as u64;
        }
    })
    .await;
    assert!(counted.is_ok(), "the download took over {TRANSFER:?}");
    assert_eq!(received, LARGE);
    let (_, peak_after_download) = gw.memory();

    // Upload: the upstream counts what arrives.
    let request = Request::post(gw.url("/upload"))
        .body(TestBody::repeat(LARGE))
        .unwrap();
    let response = tokio::time::timeout(TRANSFER, client().request(request))
        .await
        .expect("the upload ended in time")
        .unwrap();
    assert!(matches!(upstream.next_event().await, Event::FirstChunk(_)));
    let counted: Value = serde_json::from_str(&text(response).await).unwrap();
    assert_eq!(counted["bytes"], LARGE);
    let (_, peak_after_upload) = gw.memory();

    eprintln!(
        "gateway peak memory: {} KiB before, {} KiB after the download, {} KiB after the upload",
        peak_before >> 10,
        peak_after_download >> 10,
        peak_after_upload >> 10
    );
    for (what, peak) in [
        ("download", peak_after_download),
        ("upload", peak_after_upload),
    ] {
        let growth = peak.saturating_sub(peak_before);
        assert!(
            growth < GROWTH,
            "the gateway's peak memory grew by {} MiB during the {what} of {} MiB",
            growth >> 20,
            LARGE >> 20
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_chunk_of_an_answer_arrives_while_the_upstream_holds_the_rest() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url()]);
    let response = tokio::time::timeout(PATIENCE, client().request(get(&gw.url("/hold"))))
        .await
        .expect("the answer's head came while the upstream held its body")
        .unwrap();
    assert_eq!(upstream.next_event().await, Event::FirstSent);
    let mut body = response.into_body();
    let first = tokio::time::timeout(PATIENCE, body.frame())
        .await
        .expect("the first chunk came while the upstream held the rest")
        .unwrap()
        .unwrap();
    assert_eq!(data(first), Bytes::from_static(b"first;"));
    upstream.release();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, Bytes::from_static(b"rest"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_chunk_of_a_request_arrives_while_the_client_holds_the_rest() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(&["--upstream", &upstream.url()]);
    let (body, chunks) = TestBody::channel();
    let request = Request::post(gw.url("/upload")).body(body).unwrap();
    let answer = tokio::spawn(client().request(request));
    chunks
        .send(Ok(Bytes::from(vec![b'a'; 1000])))
        .await
        .unwrap();
    // The upstream has the first chunk before the client sends more.
    let Event::FirstChunk(first) = upstream.next_event().await else {
        panic!("an upload event");
    };
    assert!(first > 0 && first <= 1000, "{first}");
    chunks.send(Ok(Bytes::from(vec![b'b'; 500]))).await.unwrap();
    drop(chunks);
    let response = tokio::time::timeout(PATIENCE, answer)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let counted: Value = serde_json::from_str(&text(response).await).unwrap();
    assert_eq!(counted["bytes"], 1500);
}
