//! Black box, issue 19 items 5 and 6: what one ingest request and one organisation may cost.
//! The real server on SQLite and PostgreSQL, through HTTP:
//! - a gzip bomb and a batch of hundreds of thousands of tiny samples are refused (413) without
//!   the server's peak memory (`VmHWM` of the child process) growing past a bound;
//! - a batch with more samples than `--max-samples-per-batch` is refused whole (413);
//! - one API key's requests in flight are bounded (429 with Retry-After), another key's are not;
//! - quotas on GPUs, hosts and label-made teams per organisation refuse a batch whole (429);
//! - a GPU stays with its host (409 for a batch of another host) until an admin moves it, or
//!   its old host has been silent past `--gpu-move-after`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use fleetlens_tests::http::{get_ok, now_ms};
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, gzip, table_counts};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(
    bombs_are_refused_and_memory_stays_bounded,
    batches_past_the_sample_cap_are_refused_whole,
    requests_in_flight_are_bounded_per_key,
    organisation_quotas_refuse_batches_whole,
    a_gpu_stays_with_its_host_until_an_admin_moves_it,
);

fn sample(uuid: &str, ts: i64) -> Value {
    json!({"ts_ms": ts, "uuid": uuid, "gpu_index": 0, "name": "NVIDIA H100 80GB HBM3",
           "gpu_util_pct": 50.0, "sm_active_pct": 20.0, "power_w": 300.0})
}

struct Answer {
    status: u16,
    body: Value,
    retry_after: Option<String>,
}

async fn send(server: &TestServer, token: &str, body: Vec<u8>, gzipped: bool) -> Answer {
    let mut req = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
        .post(server.url("/api/v1/ingest"))
        .bearer_auth(token)
        .header("content-type", "application/json");
    if gzipped {
        req = req.header("content-encoding", "gzip");
    }
    let resp = req.body(body).send().await.expect("an answer");
    let status = resp.status().as_u16();
    let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
    Answer { status, body: resp.json().await.unwrap_or(Value::Null), retry_after }
}

async fn ingest(server: &TestServer, host: &str, samples: Vec<Value>) -> Answer {
    ingest_labelled(server, host, json!({}), samples).await
}

async fn ingest_labelled(server: &TestServer, host: &str, labels: Value, samples: Vec<Value>) -> Answer {
    let body = serde_json::to_vec(&json!({"host": host, "labels": labels, "samples": samples})).unwrap();
    send(server, ADMIN_TOKEN, body, false).await
}

/// `VmHWM` (peak resident memory) of the server process, kB.
fn peak_rss_kb(server: &TestServer) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM")
}

async fn bombs_are_refused_and_memory_stays_bounded(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    // Warm up: one ordinary batch, so the baseline includes what any ingest allocates.
    let ts = now_ms() - 60_000;
    assert_eq!(ingest(&server, "warm", (0..40).map(|i| sample("GPU-warm", ts + i * 1000)).collect()).await.status, 200);
    let before = table_counts(&db.url).await;
    let peak_before = peak_rss_kb(&server);

    // 200 MiB of JSON whitespace in ~200 kB of gzip: refused once 8 MiB (the default) are read
    // (the old server inflated 128 MiB first).
    let bomb = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![b' '; 200 << 20]).unwrap();
        e.finish().unwrap()
    };
    assert!(bomb.len() < 512 << 10, "a few hundred kB on the wire: {}", bomb.len());
    let started = Instant::now();
    let a = send(&server, ADMIN_TOKEN, bomb, true).await;
    eprintln!("gzip bomb (200 MiB inflated) refused in {:?}", started.elapsed());
    assert_eq!(a.status, 413, "{}", a.body);
    assert_eq!(a.body["error"]["code"], "payload_too_large");
    assert!(a.body["error"]["message"].as_str().unwrap().contains("--max-decoded-bytes"), "{}", a.body);
    eprintln!("after the gzip bomb: peak +{} kB", peak_rss_kb(&server) - peak_before);

    // Under the decoded limit, but 600,000 tiny samples: each is ~500 bytes once decoded, so
    // without the count limit they would take ~300 MB before validation.
    let tiny = format!("{{\"host\":\"n\",\"samples\":[{}]}}", vec!["{\"ts_ms\":1}"; 600_000].join(","));
    assert!(tiny.len() < 8 << 20);
    let a = send(&server, ADMIN_TOKEN, gzip(tiny.as_bytes()), true).await;
    assert_eq!(a.status, 413, "{}", a.body);
    assert!(a.body["error"]["message"].as_str().unwrap().contains("10000 samples"), "{}", a.body);
    eprintln!("after the tiny samples: peak +{} kB", peak_rss_kb(&server) - peak_before);

    // One sample listing 700,000 processes (~10 bytes of JSON, ~330 bytes decoded each).
    let procs = format!(
        "{{\"host\":\"n\",\"samples\":[{{\"ts_ms\":{ts},\"uuid\":\"GPU-p\",\"processes\":[{}]}}]}}",
        vec!["{\"pid\":1}"; 700_000].join(",")
    );
    let a = send(&server, ADMIN_TOKEN, gzip(procs.as_bytes()), true).await;
    assert!(a.status == 400 || a.status == 413, "{}", a.body);
    assert!(a.body["error"]["message"].as_str().unwrap().contains("4096 processes"), "{}", a.body);

    let grown_mb = peak_rss_kb(&server).saturating_sub(peak_before) / 1024;
    eprintln!("peak RSS {} MB before the bombs, +{grown_mb} MB after", peak_before / 1024);
    // Bounded well below what one request could take before (the 128 MiB decoded limit for the
    // bomb alone; ~300 MB for the tiny samples): 37-75 MB measured here, as allocator arenas of
    // the decoding threads vary.
    assert!(grown_mb < 100, "the server's peak memory grew by {grown_mb} MB for refused bombs");
    assert_eq!(table_counts(&db.url).await, before, "nothing stored");
    let ready = reqwest::get(server.url("/readyz")).await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);
}

async fn batches_past_the_sample_cap_are_refused_whole(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let ts = now_ms() - 3_600_000;
    // The default cap (10,000): 10,001 valid samples of 8 GPUs, which the old server stored.
    let server = TestServer::spawn(&db.url, &[]);
    let many: Vec<Value> = (0..10_001).map(|i| sample(&format!("GPU-cap-{}", i % 8), ts + (i / 8) * 250)).collect();
    let before = table_counts(&db.url).await;
    let a = ingest(&server, "n1", many.clone()).await;
    assert_eq!(a.status, 413, "{}", a.body);
    assert_eq!(a.body["error"]["code"], "payload_too_large");
    let message = a.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("more than 10000 samples") && message.contains("--max-samples-per-batch"), "{message}");
    assert_eq!(table_counts(&db.url).await, before, "nothing stored");
    assert_eq!(ingest(&server, "n1", many[..10_000].to_vec()).await.status, 200, "the cap itself is allowed");
    drop(server);

    // A lower cap.
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--max-samples-per-batch", "100"]);
    let a = ingest(&server, "n1", many[..101].to_vec()).await;
    assert_eq!(a.status, 413, "{}", a.body);
    assert!(a.body["error"]["message"].as_str().unwrap().contains("more than 100 samples"), "{}", a.body);
    assert_eq!(table_counts(&db.url).await.samples, 0);
    assert_eq!(ingest(&server, "n1", many[..100].to_vec()).await.status, 200);
}

/// What the server answered on `s` within `wait`, if anything.
fn answer_within(s: &TcpStream, wait: Duration) -> Option<String> {
    let mut s = s.try_clone().unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = vec![0; 4096];
    let n = s.read(&mut buf).ok()?;
    (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// A request whose headers are sent and whose body is not: the server has taken its permit.
fn stalled_request(server: &TestServer, token: &str) -> TcpStream {
    let host = server.base_url.trim_start_matches("http://");
    let mut s = TcpStream::connect(host).unwrap();
    write!(
        s,
        "POST /api/v1/ingest HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"host\":"
    )
    .unwrap();
    s.flush().unwrap();
    s
}

async fn requests_in_flight_are_bounded_per_key(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--max-concurrent-ingest-per-key", "2"]);
    let created = reqwest::Client::new()
        .post(server.url("/api/v1/api-keys"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "other agent", "scopes": ["ingest"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let other_key = created.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
    let ts = now_ms() - 60_000;
    let body = |uuid: &str| serde_json::to_vec(&json!({"host": "n1", "samples": [sample(uuid, ts)]})).unwrap();

    // Requests whose body never comes hold the key's two permits. Stalled requests are opened
    // until one is refused at once: then two others hold the permits, and keep them.
    let mut stalled = Vec::new();
    let first_refusal = loop {
        assert!(stalled.len() < 20, "no stalled request was ever refused");
        let s = stalled_request(&server, ADMIN_TOKEN);
        let answer = answer_within(&s, Duration::from_secs(2));
        stalled.push(s);
        if let Some(answer) = answer {
            break answer;
        }
    };
    assert!(first_refusal.starts_with("HTTP/1.1 429"), "{first_refusal}");
    assert!(first_refusal.contains("retry-after: 1"), "{first_refusal}");
    let refused = send(&server, ADMIN_TOKEN, body("GPU-third"), false).await;
    assert_eq!(refused.status, 429, "a third request of the key: {}", refused.body);
    assert_eq!(refused.body["error"]["code"], "too_many_requests");
    assert!(refused.body["error"]["message"].as_str().unwrap().contains("--max-concurrent-ingest-per-key"));
    assert_eq!(refused.retry_after.as_deref(), Some("1"));
    let a = send(&server, &other_key, body("GPU-other"), false).await;
    assert_eq!(a.status, 200, "another key is not held back: {}", a.body);

    // The stalled clients go away: their permits come back.
    for mut s in stalled {
        let _ = s.shutdown(std::net::Shutdown::Both);
        let _ = s.read(&mut [0; 16]);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let a = send(&server, ADMIN_TOKEN, body("GPU-third"), false).await;
        if a.status != 429 || Instant::now() > deadline {
            break a;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(after.status, 200, "{}", after.body);
    let gpus = get_ok(&server, "/api/v1/gpus").await;
    let mut uuids: Vec<&str> = gpus["gpus"].as_array().unwrap().iter().map(|g| g["uuid"].as_str().unwrap()).collect();
    uuids.sort();
    assert_eq!(uuids, ["GPU-other", "GPU-third"]);
}

fn assert_quota(a: &Answer, quota: &str, words: &str) {
    assert_eq!(a.status, 429, "{}", a.body);
    assert_eq!(a.body["error"]["code"], "quota_exceeded", "{}", a.body);
    assert_eq!(a.body["error"]["field"], quota, "{}", a.body);
    let message = a.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(words), "{message}");
    assert!(a.retry_after.is_some(), "Retry-After");
}

async fn organisation_quotas_refuse_batches_whole(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(
        &db.url,
        &["--max-gpus-per-org", "4", "--max-hosts-per-org", "2", "--max-teams-per-org", "1"],
    );
    let ts = now_ms() - 600_000;
    let batch = |uuids: &[&str], t: i64| uuids.iter().map(|u| sample(u, t)).collect::<Vec<_>>();
    assert_eq!(ingest(&server, "n1", batch(&["G1", "G2"], ts)).await.status, 200);
    assert_eq!(ingest(&server, "n2", batch(&["G3"], ts)).await.status, 200);

    // A third host.
    let before = table_counts(&db.url).await;
    assert_quota(&ingest(&server, "n3", batch(&["G4"], ts)).await, "hosts", "quota of 2 hosts");
    // Two more GPUs where one fits: the whole batch goes, the known GPU's samples too.
    assert_quota(&ingest(&server, "n2", batch(&["G3", "G4", "G5"], ts + 1000)).await, "gpus", "quota of 4 GPUs");
    assert_eq!(table_counts(&db.url).await, before, "nothing of the refused batches stored");
    assert_eq!(ingest(&server, "n2", batch(&["G3", "G4"], ts + 1000)).await.status, 200, "the fourth GPU fits");
    // At the quota, known GPUs keep reporting.
    assert_eq!(ingest(&server, "n1", batch(&["G1", "G2"], ts + 2000)).await.status, 200);
    assert_eq!(get_ok(&server, "/api/v1/gpus").await["gpus"].as_array().unwrap().len(), 4);

    // Teams made by the `team` label.
    let ok = ingest_labelled(&server, "n1", json!({"team": "alpha"}), batch(&["G1"], ts + 3000)).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let before = table_counts(&db.url).await;
    let refused = ingest_labelled(&server, "n2", json!({"team": "beta"}), batch(&["G3"], ts + 3000)).await;
    assert_quota(&refused, "teams", "quota of 1 teams");
    assert!(refused.body["error"]["message"].as_str().unwrap().contains("\"beta\""));
    assert_eq!(table_counts(&db.url).await, before, "nothing stored");
    let ok = ingest_labelled(&server, "n2", json!({"team": "alpha"}), batch(&["G3"], ts + 3000)).await;
    assert_eq!(ok.status, 200, "an existing team: {}", ok.body);
    let teams = get_ok(&server, "/api/v1/teams").await;
    let names: Vec<&str> = teams.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alpha"]);
}

async fn gpu_host(server: &TestServer, uuid: &str) -> Value {
    get_ok(server, &format!("/api/v1/gpus/{uuid}")).await["host"].clone()
}

async fn move_gpu(server: &TestServer, token: &str, uuid: &str, body: Value) -> Answer {
    let resp = reqwest::Client::new()
        .put(server.url(&format!("/api/v1/gpus/{uuid}/host")))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    Answer { status, body: resp.json().await.unwrap_or(Value::Null), retry_after: None }
}

async fn a_gpu_stays_with_its_host_until_an_admin_moves_it(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--gpu-move-after", "5m"]);
    let ts = now_ms() - 60_000;
    assert_eq!(ingest(&server, "n1", vec![sample("GPU-a", ts)]).await.status, 200);

    // Another host claims it with a newer sample (the old server re-homed it).
    let before = table_counts(&db.url).await;
    let a = ingest(&server, "n2", vec![sample("GPU-a", ts + 1000), sample("GPU-b", ts + 1000)]).await;
    assert_eq!(a.status, 409, "{}", a.body);
    assert_eq!(a.body["error"]["code"], "conflict");
    let message = a.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("GPU-a") && message.contains("\"n1\"") && message.contains("/host"), "{message}");
    assert_eq!(table_counts(&db.url).await, before, "nothing of the batch stored");
    assert_eq!(gpu_host(&server, "GPU-a").await, "n1");

    // Only an admin moves it.
    let created = reqwest::Client::new()
        .post(server.url("/api/v1/api-keys"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "agent", "scopes": ["ingest", "read"]}))
        .send()
        .await
        .unwrap();
    let agent_key = created.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
    assert_eq!(move_gpu(&server, &agent_key, "GPU-a", json!({"host": "n2"})).await.status, 403);
    assert_eq!(move_gpu(&server, ADMIN_TOKEN, "GPU-nope", json!({"host": "n2"})).await.status, 404);
    let bad = move_gpu(&server, ADMIN_TOKEN, "GPU-a", json!({"host": " "})).await;
    assert_eq!((bad.status, bad.body["error"]["field"].as_str()), (422, Some("host")));
    let moved = move_gpu(&server, ADMIN_TOKEN, "GPU-a", json!({"host": "n2"})).await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    assert_eq!(moved.body["host"], "n2");
    assert_eq!(gpu_host(&server, "GPU-a").await, "n2");
    assert_eq!(ingest(&server, "n2", vec![sample("GPU-a", ts + 1000)]).await.status, 200);
    let a = ingest(&server, "n1", vec![sample("GPU-a", ts + 2000)]).await;
    assert_eq!(a.status, 409, "now its old host is the stranger: {}", a.body);
    assert_eq!(gpu_host(&server, "GPU-a").await, "n2");

    // --gpu-move-after 5m: a GPU whose host has sent nothing of it for 10 minutes moves with
    // the first batch of its new host (physically moved); a live one does not.
    let old = now_ms() - 600_000;
    assert_eq!(ingest(&server, "n3", vec![sample("GPU-moved", old)]).await.status, 200);
    assert_eq!(ingest(&server, "n4", vec![sample("GPU-moved", now_ms() - 1000)]).await.status, 200);
    assert_eq!(gpu_host(&server, "GPU-moved").await, "n4");
    assert_eq!(ingest(&server, "n3", vec![sample("GPU-moved", now_ms() - 500)]).await.status, 409);
    assert_eq!(gpu_host(&server, "GPU-moved").await, "n4");
}
