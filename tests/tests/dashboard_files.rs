//! Black box: the dashboard's files as the server sends them. `frontend/build.sh` writes a
//! zopfli-compressed `x.gz` beside each file; a client that accepts gzip gets those bytes as
//! they are, other clients the plain file, and an app address (`/gpus`) the index page.

use std::io::Read;

use fleetlens_tests::{Backend, TestDatabase, TestServer, gzip};
use reqwest::header::{ACCEPT_ENCODING, CONTENT_ENCODING};

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).expect("gunzip");
    out
}

#[tokio::test]
async fn precompressed_files_are_sent_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let js = "export function hello() { return 'fleetlens'; }\n".repeat(200);
    let index = "<!doctype html><title>Fleetlens</title><script type=module src=/app.js></script>\n";
    std::fs::write(dir.path().join("app.js"), &js).unwrap();
    std::fs::write(dir.path().join("index.html"), index).unwrap();
    // Made here with flate2, not by the server: the test can tell the two apart byte for byte.
    let js_gz = gzip(js.as_bytes());
    let index_gz = gzip(index.as_bytes());
    std::fs::write(dir.path().join("app.js.gz"), &js_gz).unwrap();
    std::fs::write(dir.path().join("index.html.gz"), &index_gz).unwrap();
    std::fs::write(dir.path().join("plain.css"), "body { color: black; }\n".repeat(100)).unwrap();

    let db = TestDatabase::new(Backend::Sqlite).await;
    let static_dir = dir.path().to_str().unwrap();
    let server = TestServer::spawn(&db.url, &["--static-dir", static_dir]);
    let client = reqwest::Client::new();
    let get = |path: &str, gzip_ok: bool| {
        let mut req = client.get(server.url(path));
        if gzip_ok {
            req = req.header(ACCEPT_ENCODING, "gzip");
        }
        req.send()
    };

    let r = get("/app.js", true).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()[CONTENT_ENCODING], "gzip");
    assert_eq!(r.bytes().await.unwrap().as_ref(), js_gz.as_slice(), "the .gz file, not a recompression");

    let r = get("/app.js", false).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get(CONTENT_ENCODING).is_none());
    assert_eq!(r.text().await.unwrap(), js);

    // An address of the app falls back to the index page, also precompressed.
    let r = get("/gpus", true).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()[CONTENT_ENCODING], "gzip");
    assert_eq!(r.bytes().await.unwrap().as_ref(), index_gz.as_slice());

    // Without a `.gz` beside it, a file is compressed on the fly.
    let r = get("/plain.css", true).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()[CONTENT_ENCODING], "gzip");
    let body = r.bytes().await.unwrap();
    assert_eq!(gunzip(&body), "body { color: black; }\n".repeat(100).into_bytes());
}
