//! Black box: billing time is sampled time (issue 20, part 4). The recorded H200 trace (84
//! samples about 1 s apart, starting 43.6 s into a minute and ending 7.2 s into one) is replayed
//! by the real agent, and the billing report, the fleet summary and the owner report must put
//! exactly its sampled time in states, whatever the report period, and the rest of the paid
//! time in `offline`. On SQLite and PostgreSQL.

use fleetlens_tests::http::{get_ok, now_ms};
use fleetlens_tests::{Backend, TestDatabase, TestServer, agent_command, fixture_lines};
use serde_json::Value;

fleetlens_tests::for_each_backend!(
    states_hold_the_sampled_time_whatever_the_period,
    a_gap_between_two_replayed_segments_is_offline,
);

const HOUR_MS: i64 = 3_600_000;

/// The fixture's samples moved by whole minutes so that the last one is 15–16 minutes old:
/// recent enough to arrive as live data (not back-fill, which is paid only over its own span:
/// docs/ALERTING.md "Back-fill"), old enough that the periods ending 1 s and 30 s after it lie
/// in the past; alignment within the minute kept.
fn recent_trace() -> Vec<Value> {
    let mut lines = fixture_lines();
    let last = lines.last().unwrap()["ts_ms"].as_i64().unwrap();
    let shift = (now_ms() - 15 * 60_000 - last).div_euclid(60_000) * 60_000;
    for l in &mut lines {
        l["ts_ms"] = (l["ts_ms"].as_i64().unwrap() + shift).into();
    }
    lines
}

/// Replays `lines` through the real agent (one `--once` run: one segment).
fn replay(server: &TestServer, lines: &[Value]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, text).unwrap();
    let status = agent_command(server, &format!("replay:{}", path.display()), &dir.path().join("spool"))
        .arg("--once")
        .status()
        .expect("run agent");
    assert!(status.success());
}

fn ts(lines: &[Value]) -> Vec<i64> {
    lines.iter().map(|l| l["ts_ms"].as_i64().unwrap()).collect()
}

/// Sampled seconds of timestamps (docs/METRICS.md, "Sampled time and billing"), computed here
/// on its own: each sample covers the time to the next one, unless that gap reaches 3
/// intervals (offline), then one interval; the last sample covers one interval. The interval
/// is the median gap.
fn sampled_s(ts: &[i64]) -> f64 {
    let mut gaps: Vec<i64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    let interval = gaps[gaps.len() / 2];
    let covered: i64 = ts.windows(2).map(|w| if w[1] - w[0] < 3 * interval { w[1] - w[0] } else { interval }).sum();
    (covered + interval) as f64 / 1000.0
}

/// (seconds in states other than offline, offline seconds) of a billing row or summary.
fn split(hours_by_state: &Value) -> (f64, f64) {
    let mut states = 0.0;
    let mut offline = 0.0;
    for (state, h) in hours_by_state.as_object().unwrap() {
        let s = h.as_f64().unwrap() * 3600.0;
        if state == "offline" { offline += s } else { states += s }
    }
    (states, offline)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

/// Checks billing (by GPU), the fleet summary and the owner report over `[from, to)` of a GPU
/// whose paid span is `[first, to)`: `sampled` seconds in states, the rest offline.
/// A period ending after now is paid up to now: the server's clock is read a moment after
/// `now_ms()` here, so such periods are compared within 2 s.
async fn check_period(server: &TestServer, from: i64, to: i64, first: i64, sampled: f64, what: &str) {
    let now = now_ms();
    let paid = (to.min(now) - first.max(from)) as f64 / 1000.0;
    let tol = if to > now { 2.0 } else { 1e-6 };
    // Sampled time can pass the paid span by part of an interval (the first sample counts one
    // interval, which began before it); the states are then cut to the paid span.
    let want_states = sampled.min(paid);
    let b = get_ok(server, &format!("/api/v1/reports/billing?group_by=gpu&from={from}&to={to}")).await;
    let rows = b["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{what}: {b}");
    let (states, offline) = split(&rows[0]["hours_by_state"]);
    assert!(close(rows[0]["gpu_hours"].as_f64().unwrap() * 3600.0, paid, tol), "{what}: paid {b}");
    assert!(close(states, want_states, 0.01), "{what}: billing states {states:.3} s, sampled {sampled:.3} s");
    assert!(
        close(offline, paid - want_states, 0.01 + tol),
        "{what}: billing offline {offline:.3} s of {paid:.3} s paid"
    );

    let s = get_ok(server, &format!("/api/v1/fleet/summary?from={from}&to={to}")).await;
    let (states, offline) = split(&s["hours_by_state"]);
    assert!(close(states, want_states, 0.01), "{what}: summary states {states:.3} s, sampled {sampled:.3} s");
    assert!(close(offline, paid - want_states, 0.01 + tol), "{what}: summary offline {offline:.3} s");

    // Owner rows share the state time among the processes' owners; offline is nobody's.
    let o = get_ok(server, &format!("/api/v1/reports/billing?group_by=user&from={from}&to={to}")).await;
    let owner_s: f64 = o["rows"].as_array().unwrap().iter().map(|r| r["gpu_hours"].as_f64().unwrap() * 3600.0).sum();
    assert!(close(owner_s, want_states, 0.01), "{what}: owner rows {owner_s:.3} s, sampled {sampled:.3} s: {o}");
}

/// The figures: with `to` 1 s after the last sample the old server gave 84.5 s of
/// states; with `to` 1 h after it, 136.4 s (the last minute credited whole) and 3,547 s
/// offline. Now both give the sampled time, and the rest of the hour is offline.
async fn states_hold_the_sampled_time_whatever_the_period(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let lines = recent_trace();
    replay(&server, &lines);
    let t = ts(&lines);
    let (first, last) = (t[0], *t.last().unwrap());
    let sampled = sampled_s(&t);
    assert!(close(sampled, 84.55, 0.01), "the trace's sampled time: {sampled}");
    // Periods that begin 10 min before the first sample (paid from the first sample on).
    let from = first - 600_000;
    check_period(&server, from, last + 1000, first, sampled, "to = last sample + 1 s").await;
    check_period(&server, from, last + HOUR_MS, first, sampled, "to = last sample + 1 h").await;
    // A period ending inside the last sample's minute, 30 s after it (partial minute at the end).
    check_period(&server, from, last + 30_000, first, sampled, "to = last sample + 30 s").await;
    // Partial minutes at both ends of the period, inside the trace: 20.5 s after the first sample
    // (in its partly sampled first minute) to 10.3 s before the last (in the last minute).
    // The samples cover the period without gaps: states = the period, within one interval.
    let (a, b) = (first + 20_500, last - 10_300);
    let inside = (b - a) as f64 / 1000.0;
    let bill = get_ok(&server, &format!("/api/v1/reports/billing?group_by=gpu&from={a}&to={b}")).await;
    let (states, offline) = split(&bill["rows"][0]["hours_by_state"]);
    assert!(close(states, inside, 1.1), "inside the trace: {states:.3} s of states for a {inside:.3} s period");
    assert!(close(states + offline, inside, 1e-6), "states + offline = paid: {bill}");
}

/// Two segments replayed by two agent runs with 30 s of the trace left out between them: the
/// minute holding the gap counts only its sampled seconds, and the gap is offline.
async fn a_gap_between_two_replayed_segments_is_offline(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let lines = recent_trace();
    let (head, tail) = (&lines[..30], &lines[60..]);
    replay(&server, head);
    replay(&server, tail);
    let kept: Vec<Value> = head.iter().chain(tail).cloned().collect();
    let t = ts(&kept);
    let (first, last) = (t[0], *t.last().unwrap());
    let sampled = sampled_s(&t);
    // 54 samples: 53 s before and after the gap, the sample before the gap one interval.
    assert!(close(sampled, 54.5, 0.5), "sampled {sampled}");
    let from = first - 600_000;
    check_period(&server, from, last + HOUR_MS, first, sampled, "gap, to = last + 1 h").await;
    check_period(&server, from, last + 1000, first, sampled, "gap, to = last + 1 s").await;
}
