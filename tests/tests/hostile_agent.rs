//! Black box, a hostile agent (issue 19), on SQLite and PostgreSQL: names and values an agent
//! could send to attack whoever reads Fleetlens' outputs — quotes, backslashes, formula
//! prefixes, markup, unicode bidi controls, names at the length limit, extreme numbers — go
//! through `POST /api/v1/ingest`, and every output is checked:
//!
//! - names that ingest accepts come back byte-identical in the JSON API (GPU list, GPU detail,
//!   samples, billing rows), as spreadsheet text in the billing CSV (a leading `'` before `=`,
//!   `+`, `-`, `@`; by host, GPU, model, team, process owner and owner label), and escaped in `/metrics`, which the real `promtool check metrics` passes;
//! - batches that ingest refuses (control characters in names, 10,000-character strings, NaN and
//!   infinities as JSON can carry them, negative and out-of-range numbers) get a 4xx with the
//!   JSON error body, and leave the stored GPUs, samples and rollups exactly as they were.
//!
//! The dashboard's side (hostile names shown as text, no script runs) is
//! tests/browser/hostile-names.test.mjs.

use fleetlens_tests::http::{get_ok, get_text, now_ms, post_bytes, segment};
use fleetlens_tests::{Backend, TestDatabase, TestServer, promtool_check, table_counts};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(hostile_names_and_values_reach_every_output_safely);

/// One hostile host with one GPU and one process owner, all accepted by ingest.
struct HostileGpu {
    host: String,
    uuid: String,
    name: String,
    owner_user: String,
}

fn accepted_corpus() -> Vec<HostileGpu> {
    vec![
        // Breaks out of a Prometheus label value; a formula in the GPU name; a DDE payload as owner.
        HostileGpu {
            host: r#"n1",team="x"#.into(),
            uuid: r#"GPU-"quoted"\back\slash"#.into(),
            name: r#"=HYPERLINK("http://evil","x")"#.into(),
            owner_user: r#"=cmd|' /C calc'!A0"#.into(),
        },
        // Formula host; markup that would run if a page put it into HTML.
        HostileGpu {
            host: r#"=HYPERLINK("http://evil","x")"#.into(),
            uuid: "GPU-<img src=x onerror=window.__pwned=1>".into(),
            name: "<script>window.__pwned=1</script>".into(),
            owner_user: "@SUM(1+1)*cmd|' /C calc'!A0".into(),
        },
        // Unicode bidi controls (right-to-left override, isolates), non-ASCII text.
        HostileGpu {
            host: "gpu\u{202E}10-edon\u{2066}x\u{2069}".into(),
            uuid: "GPU-\u{200F}rtl\u{202B}é🚀".into(),
            name: "+1 émoji 🚀 \u{202E}".into(),
            owner_user: "+SUM(1)".into(),
        },
        // At the length limits (host 255, uuid and name 256 bytes), escapes all the way.
        HostileGpu {
            host: format!("{}x", "\\\"".repeat(127)),
            uuid: format!("-{}", "9".repeat(255)),
            name: format!("@{}", "\\".repeat(255)),
            owner_user: format!("-{}", "2+3".repeat(300)),
        },
    ]
}

/// A minute of samples (every 10 s, ending a minute ago) of `gpu`, with extreme but valid numbers.
fn samples_of(gpu: &HostileGpu, end: i64) -> Vec<Value> {
    (0..6)
        .map(|i| {
            json!({
                "ts_ms": end - (5 - i) * 10_000, "uuid": gpu.uuid, "gpu_index": u32::MAX, "name": gpu.name,
                "gpu_util_pct": 100.0, "sm_active_pct": 0.0, "tensor_active_pct": 0.0,
                "mem_used_bytes": 1i64 << 49, "mem_total_bytes": 1i64 << 50,
                "power_w": 1e15, "power_limit_w": 1e15, "temp_c": -99.5, "throttle_reasons": u64::MAX,
                "processes": [{"pid": u32::MAX, "used_bytes": 1i64 << 49, "sm_pct": 0.0,
                               "user": gpu.owner_user,
                               "owner": {"user": gpu.owner_user, "labels": {"EXPERIMENT": gpu.owner_user}}}],
            })
        })
        .collect()
}

/// How a text cell must read in the CSV: OWASP's rule, a `'` before a formula prefix.
fn spreadsheet(text: &str) -> String {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r', '\n']) { format!("'{text}") } else { text.to_string() }
}

/// The label value as the exposition format writes it.
fn label_escaped(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

async fn post_raw(server: &TestServer, body: Vec<u8>) -> (u16, String, String) {
    let resp = post_bytes(server, "/api/v1/ingest", &[("content-type", "application/json")], body).await;
    let status = resp.status().as_u16();
    let content_type = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (status, content_type, resp.text().await.unwrap())
}

/// What the API says is stored: every GPU (without the clock-dependent state) and its samples.
async fn stored(server: &TestServer) -> Vec<(Value, Value)> {
    let list = get_ok(server, "/api/v1/gpus").await;
    let mut out = Vec::new();
    for g in list["gpus"].as_array().unwrap() {
        let mut g = g.clone();
        g.as_object_mut().unwrap().remove("state");
        let uuid = g["uuid"].as_str().unwrap();
        let samples = get_ok(server, &format!("/api/v1/gpus/{}/samples?from=0", segment(uuid))).await;
        out.push((g, samples["samples"].clone()));
    }
    out.sort_by(|a, b| a.0["uuid"].as_str().cmp(&b.0["uuid"].as_str()));
    out
}

/// The billing CSV of `group_by`: the header and the value of the group column of each row.
async fn csv_groups(server: &TestServer, group_by: &str) -> (Vec<String>, Vec<String>) {
    let (status, text) = get_text(server, &format!("/api/v1/reports/billing?format=csv&group_by={group_by}")).await;
    assert_eq!(status, 200, "{group_by}: {text}");
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_string).collect();
    let groups = reader.records().map(|r| r.unwrap()[2].to_string()).collect();
    (header, groups)
}

/// Batches ingest must refuse whole: each holds a valid sample of a new GPU and a new sample of
/// an existing one next to the hostile part.
fn refused_corpus(existing_uuid: &str, ts: i64) -> Vec<(&'static str, Vec<u8>)> {
    let ok_new = json!({"ts_ms": ts, "uuid": "GPU-refused-canary", "gpu_util_pct": 50.0});
    let ok_existing = json!({"ts_ms": ts, "uuid": existing_uuid, "gpu_util_pct": 50.0});
    let batch = |host: &str, bad: Value| -> Vec<u8> {
        serde_json::to_vec(&json!({"host": host, "samples": [ok_new, ok_existing, bad]})).unwrap()
    };
    let sample_with = |field: &str, value: Value| {
        let mut s = json!({"ts_ms": ts + 1, "uuid": "GPU-refused-canary-2", "gpu_util_pct": 50.0});
        s[field] = value;
        s
    };
    // JSON text with a literal serde_json cannot write (1e999, NaN).
    let literal = |field: &str, lit: &str| -> Vec<u8> {
        String::from_utf8(batch("ok-host", sample_with(field, json!("@@")))).unwrap().replacen("\"@@\"", lit, 1).into()
    };
    let long = "x".repeat(10_000);
    let process = |p: Value| sample_with("processes", json!([p]));
    vec![
        (
            "host with a line feed (a forged /metrics line)",
            batch("n1\n# TYPE evil gauge", sample_with("temp_c", json!(40))),
        ),
        ("host with a carriage return", batch("n1\r=cmd", sample_with("temp_c", json!(40)))),
        ("host with a NUL", batch("n1\u{0}", sample_with("temp_c", json!(40)))),
        ("host with an ANSI escape", batch("n1\u{1b}[31m", sample_with("temp_c", json!(40)))),
        ("host of 10,000 characters", batch(&long, sample_with("temp_c", json!(40)))),
        ("uuid with a line feed", batch("ok-host", sample_with("uuid", json!("GPU-a\nb")))),
        ("uuid of 10,000 characters", batch("ok-host", sample_with("uuid", json!(long)))),
        ("GPU name with a tab", batch("ok-host", sample_with("name", json!("H100\t=1+1")))),
        ("GPU name of 10,000 characters", batch("ok-host", sample_with("name", json!(long)))),
        ("team label with a line feed", {
            let v = json!({"host": "ok-host", "labels": {"team": "a\nb"}, "samples": [ok_new, ok_existing]});
            serde_json::to_vec(&v).unwrap()
        }),
        ("team label of 10,000 characters", {
            let v = json!({"host": "ok-host", "labels": {"team": long}, "samples": [ok_new, ok_existing]});
            serde_json::to_vec(&v).unwrap()
        }),
        ("owner user of 10,000 characters", batch("ok-host", process(json!({"pid": 1, "owner": {"user": long}})))),
        ("process command of 10,000 characters", batch("ok-host", process(json!({"pid": 1, "command": long})))),
        ("NaN as a string", batch("ok-host", sample_with("gpu_util_pct", json!("NaN")))),
        ("Infinity as a string", batch("ok-host", sample_with("power_w", json!("Infinity")))),
        ("1e999 (infinite once parsed)", literal("sm_active_pct", "1e999")),
        ("-1e999", literal("temp_c", "-1e999")),
        ("a bare NaN", literal("gpu_util_pct", "NaN")),
        ("a negative percentage", batch("ok-host", sample_with("gpu_util_pct", json!(-1.0)))),
        ("a huge power", batch("ok-host", sample_with("power_w", json!(1e300)))),
        ("a negative byte count", batch("ok-host", sample_with("mem_used_bytes", json!(-1)))),
        ("a byte count beyond i64", literal("mem_total_bytes", "9223372036854775808")),
        ("a negative timestamp", batch("ok-host", sample_with("ts_ms", json!(-1)))),
        ("timestamp i64::MAX", batch("ok-host", sample_with("ts_ms", json!(i64::MAX)))),
        ("timestamp 1e20", literal("ts_ms", "1e20")),
        ("a negative GPU index", batch("ok-host", sample_with("gpu_index", json!(-1)))),
        ("a GPU index beyond u32", batch("ok-host", sample_with("gpu_index", json!(1u64 << 32)))),
        ("a negative throttle bit set", batch("ok-host", sample_with("throttle_reasons", json!(-1)))),
        ("a negative pid", batch("ok-host", process(json!({"pid": -5})))),
        ("a process SM % of 1e999", {
            let text = String::from_utf8(batch("ok-host", process(json!({"pid": 1, "sm_pct": "@@"})))).unwrap();
            text.replacen("\"@@\"", "1e999", 1).into()
        }),
    ]
}

async fn hostile_names_and_values_reach_every_output_safely(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let end = now_ms() - 60_000;
    let corpus = accepted_corpus();
    let team = "ml \"core\" \\ =team";
    for gpu in &corpus {
        let batch = json!({"host": gpu.host, "labels": {"team": team}, "samples": samples_of(gpu, end)});
        let (status, _, body) = post_raw(&server, serde_json::to_vec(&batch).unwrap()).await;
        assert_eq!(status, 200, "{:?} is valid: {body}", gpu.host);
    }

    // JSON: byte-identical, in the list, the detail and the samples.
    let list = get_ok(&server, "/api/v1/gpus").await;
    let gpus = list["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), corpus.len(), "{list}");
    for gpu in &corpus {
        let g = gpus.iter().find(|g| g["uuid"] == gpu.uuid.as_str()).unwrap_or_else(|| panic!("{:?} listed", gpu.uuid));
        assert_eq!((g["host"].as_str().unwrap(), g["name"].as_str().unwrap()), (gpu.host.as_str(), gpu.name.as_str()));
        let detail = get_ok(&server, &format!("/api/v1/gpus/{}", segment(&gpu.uuid))).await;
        assert_eq!(
            (detail["uuid"].as_str(), detail["host"].as_str()),
            (Some(gpu.uuid.as_str()), Some(gpu.host.as_str()))
        );
        let samples = get_ok(&server, &format!("/api/v1/gpus/{}/samples?from=0", segment(&gpu.uuid))).await;
        let samples = samples["samples"].as_array().unwrap();
        assert_eq!(samples.len(), 6);
        let process = &samples[0]["processes"][0];
        assert_eq!(process["owner"]["user"].as_str(), Some(gpu.owner_user.as_str()));
        assert_eq!(process["pid"], json!(u32::MAX));
        assert_eq!(samples[0]["throttle_reasons"], json!(u64::MAX), "{}", samples[0]);
        assert_eq!(samples[0]["gpu_index"], json!(u32::MAX));
        assert_eq!(samples[0]["temp_c"], json!(-99.5));
    }
    let report = get_ok(&server, "/api/v1/reports/billing?group_by=host").await;
    let mut hosts: Vec<&str> =
        report["rows"].as_array().unwrap().iter().map(|r| r["group"].as_str().unwrap()).collect();
    let mut want: Vec<&str> = corpus.iter().map(|g| g.host.as_str()).collect();
    hosts.sort_unstable();
    want.sort_unstable();
    assert_eq!(hosts, want, "billing rows name the hosts as sent");

    // CSV: every text cell is spreadsheet text, by host, GPU, model, team and process owner.
    let cases: [(&str, Vec<String>); 6] = [
        ("host", corpus.iter().map(|g| g.host.clone()).collect()),
        ("gpu", corpus.iter().map(|g| g.uuid.clone()).collect()),
        ("model", corpus.iter().map(|g| g.name.clone()).collect()),
        ("team", vec![team.to_string()]),
        ("user", corpus.iter().map(|g| g.owner_user.clone()).collect()),
        ("label:EXPERIMENT", corpus.iter().map(|g| g.owner_user.clone()).collect()),
    ];
    for (group_by, names) in cases {
        let (header, groups) = csv_groups(&server, group_by).await;
        assert_eq!(header[2], group_by);
        for name in &names {
            let cell = spreadsheet(name);
            assert!(groups.contains(&cell), "{group_by}: no cell {cell:?} in {groups:?}");
        }
        for cell in &groups {
            assert!(!cell.starts_with(['=', '+', '-', '@']), "{group_by}: formula cell {cell:?}");
        }
    }

    // /metrics: every name escaped, and the whole exposition valid for Prometheus.
    let (status, metrics) = get_text(&server, "/metrics").await;
    assert_eq!(status, 200);
    for gpu in &corpus {
        let labels = format!(
            "uuid=\"{}\",host=\"{}\",team=\"{}\",model=\"{}\"",
            label_escaped(&gpu.uuid),
            label_escaped(&gpu.host),
            label_escaped(team),
            label_escaped(&gpu.name)
        );
        let series = metrics.lines().filter(|l| l.starts_with("fleetlens_gpu_util_pct{") && l.contains(&labels));
        assert_eq!(series.count(), 1, "{labels} in\n{metrics}");
    }
    promtool_check(&metrics);

    // Refused batches: a 4xx JSON error each, and nothing stored changes.
    let before = stored(&server).await;
    let counts = table_counts(&db.url).await;
    for (what, body) in refused_corpus(&corpus[0].uuid, now_ms() - 5_000) {
        let (status, content_type, text) = post_raw(&server, body).await;
        assert!((400..500).contains(&status), "{what}: HTTP {status} {text}");
        assert!(content_type.starts_with("application/json"), "{what}: {content_type}");
        let error: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
        assert!(error["error"]["code"].is_string() && error["error"]["message"].is_string(), "{what}: {error}");
    }
    assert_eq!(table_counts(&db.url).await, counts, "refused batches stored nothing");
    assert_eq!(stored(&server).await, before, "refused batches changed no GPU and no sample");
    let (status, metrics) = get_text(&server, "/metrics").await;
    assert_eq!(status, 200);
    promtool_check(&metrics);
}
