use super::*;
use crate::fixture_tests::{clean_windows, expected, load};
use crate::quality::QualityFlags;
use crate::rollup::minute_from_samples;

#[test]
fn interval_is_the_median_gap() {
    assert_eq!(interval_from_timestamps(&[0, 1000, 2000, 3000, 60_000]), 1000);
    assert_eq!(interval_from_timestamps(&[5]), DEFAULT_INTERVAL_MS);
    assert_eq!(interval_of(61, 0, 60_000), 1000);
    assert_eq!(interval_of(1, 0, 0), DEFAULT_INTERVAL_MS);
}

#[test]
fn offline_limit_is_three_intervals_of_at_least_a_second() {
    let th = Thresholds::default();
    assert_eq!(offline_limit_ms(0, &th), 3_000);
    assert_eq!(offline_limit_ms(200, &th), 3_000);
    assert_eq!(offline_limit_ms(10_000, &th), 30_000);
    let one = Thresholds { offline_missing_intervals: 0, ..Thresholds::default() };
    assert_eq!(offline_limit_ms(10_000, &one), 10_000, "at least one interval");
}

#[test]
fn silence_counts_from_the_last_sample_beyond_the_delivery_allowance() {
    let th = Thresholds::default();
    assert!(!is_silent(10_000, 1000, 12_999, &th, 0));
    assert!(is_silent(10_000, 1000, 13_000, &th, 0));
    assert!(!is_silent(10_000, 1000, 13_000, &th, 5_000), "a batching agent is not offline between flushes");
    assert!(is_silent(10_000, 1000, 18_000, &th, 5_000));
}

#[test]
fn sample_timeline_of_the_h200_trace_gives_each_phase_its_state() {
    let trace = load();
    let samples: Vec<Sample> = trace.iter().map(|(_, s)| s.clone()).collect();
    let th = Thresholds::default();
    let windows = clean_windows(&trace);
    assert!(windows.len() > 20);
    for (phase, start, end) in windows {
        let spans = states_from_samples(&samples, start, end, end - start, &th);
        assert_eq!(spans.len(), 1);
        let c = &spans[0].classification;
        assert!(expected(&phase).contains(&c.state), "{phase} [{start}, {end}): {} ({})", c.state, c.reason);
        // The timeline hands classify_window only the neighbours it needs: same answer as
        // classifying against the whole trace.
        assert_eq!(*c, classify_window(&samples, start, end, 1000, &th));
    }
}

#[test]
fn sample_timeline_marks_a_gap_offline_and_tiles_the_range() {
    let s = |ts_ms| Sample { ts_ms, gpu_util_pct: Some(0.0), ..Default::default() };
    let samples = [s(0), s(1000), s(2000), s(20_000), s(21_000)];
    let spans = states_from_samples(&samples, 0, 22_000, 2000, &Thresholds::default());
    assert_eq!(spans.len(), 11);
    assert_eq!(spans.first().unwrap().from_ms, 0);
    assert_eq!(spans.last().unwrap().to_ms, 22_000);
    assert!(spans.windows(2).all(|w| w[0].to_ms == w[1].from_ms));
    assert_ne!(spans[0].classification.state, WorkloadState::Offline);
    assert_eq!(spans[5].classification.state, WorkloadState::Offline);
    assert_eq!(spans[10].classification.state, spans[0].classification.state);
}

fn minutes_of(samples: &[Sample]) -> Vec<RollupBucket> {
    let mut by_minute: std::collections::BTreeMap<i64, Vec<(Sample, QualityFlags)>> = Default::default();
    for s in samples {
        by_minute.entry(s.ts_ms.div_euclid(MINUTE_MS) * MINUTE_MS).or_default().push((s.clone(), QualityFlags::NONE));
    }
    by_minute.into_iter().map(|(m, mut v)| minute_from_samples(GpuId(7), m, &[], &mut v, 3)).collect()
}

#[test]
fn minute_timeline_classifies_the_h200_matmul_minute_and_leaves_empty_minutes_offline() {
    let trace = load();
    // Put the matmul phase alone in its own minute, then leave two minutes empty.
    let matmul: Vec<Sample> = trace.iter().filter(|(p, _)| p == "matmul_bf16").map(|(_, s)| s.clone()).collect();
    assert!(matmul.len() >= 5);
    let t0 = matmul[0].ts_ms;
    let shifted: Vec<Sample> =
        matmul.iter().map(|s| Sample { ts_ms: s.ts_ms - t0 + 5 * MINUTE_MS + 1_000, ..s.clone() }).collect();
    let buckets = minutes_of(&shifted);
    assert_eq!(buckets.len(), 1);
    let gpu = GpuFacts { gpu_id: GpuId(7), last_seen_ms: shifted.last().unwrap().ts_ms, ..Default::default() };
    let th = Thresholds::default();
    let spans = states_from_minutes(&buckets, &gpu, 5 * MINUTE_MS + 30_000, 8 * MINUTE_MS, MINUTE_MS, &th);
    assert_eq!(spans.len(), 3);
    assert_eq!(spans[0].from_ms, 5 * MINUTE_MS, "aligned to the minute");
    assert_eq!(spans[0].classification.state, WorkloadState::ComputeBound, "{}", spans[0].classification.reason);
    assert_eq!(spans[1].classification.state, WorkloadState::Offline);
    assert_eq!(spans[2].classification.state, WorkloadState::Offline);

    // Now: the same minute while it still reports, offline once silent.
    let now = gpu.last_seen_ms + 1_000;
    assert_eq!(current_state(&gpu, buckets.first(), now, &th, 0).state, WorkloadState::ComputeBound);
    let later = gpu.last_seen_ms + 60_000;
    assert_eq!(current_state(&gpu, buckets.first(), later, &th, 0).state, WorkloadState::Offline);
    assert_eq!(current_state(&gpu, None, now, &th, 0).state, WorkloadState::Offline);
}

#[test]
fn stored_state_holds_while_reporting() {
    let th = Thresholds::default();
    let minute = Some((61, 0, 60_000, Some("memory_bound")));
    assert_eq!(current_state_stored(60_000, minute, 61_000, &th, 0), WorkloadState::MemoryBound);
    assert_eq!(current_state_stored(60_000, minute, 63_000, &th, 0), WorkloadState::Offline);
    assert_eq!(current_state_stored(60_000, Some((61, 0, 60_000, None)), 61_000, &th, 0), WorkloadState::Offline);
    assert_eq!(current_state_stored(60_000, None, 61_000, &th, 0), WorkloadState::Offline);
}
