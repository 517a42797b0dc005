//! The batches this replica stored, kept for the alert engine so that it judges them from
//! memory instead of reading every sample back from the database (that read-back was two
//! thirds of the engine's cost and a quarter of the server's CPU under ingest load:
//! docs/BENCHMARKS.md, thirteenth session).
//!
//! Each GPU's registry row counts the committed batches that wrote it (`gpus.ingest_seq`,
//! [`fleetlens_store::GpuWritten`]). The engine knows the number up to which it has judged a
//! GPU; when it holds every batch numbered after that up to the row's number, it has
//! everything stored since, and reads nothing. A number it lacks (another replica stored
//! that batch, a batch that filled in stored samples, memory dropped at the cap, a restart)
//! sends it to the database for that GPU, as before. Reading from the database is always
//! right; memory is only a shortcut taken when it is provably complete.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fleetlens_core::{GpuId, Sample};
use fleetlens_store::GpuWritten;

/// Samples held at most, all GPUs together: past it everything held is dropped (the engine
/// then reads the database once). Several cycles of a large fleet's ingest.
const MAX_HELD_SAMPLES: usize = 200_000;

/// One GPU's part of one stored batch.
#[derive(Debug, Clone)]
pub struct HeldBatch {
    pub ingest_seq: i64,
    samples: Arc<[Sample]>,
    inserted: Vec<u32>,
}

impl HeldBatch {
    /// The samples the batch inserted for the GPU, in batch order.
    pub fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.inserted.iter().map(|&i| &self.samples[i as usize])
    }
}

/// What ingest hands the engine (see the module's documentation).
#[derive(Debug, Default)]
pub struct RecentBatches {
    /// Only while this replica runs the engine: others would hold batches no one takes.
    enabled: AtomicBool,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    by_gpu: HashMap<GpuId, Vec<HeldBatch>>,
    samples: usize,
}

/// Where the engine finds a GPU's news this cycle.
#[derive(Debug)]
pub enum News {
    /// Nothing stored since the engine's number.
    None,
    /// The batches numbered after the engine's up to `through`, in sequence order: up to the
    /// registry row's number, or short of it when the engine may wait one cycle for a batch
    /// committed but not handed over yet (ingest hands it over just after its commit).
    Held { batches: Vec<HeldBatch>, through: i64 },
    /// Some batch since is not held: read the database.
    Database,
}

impl RecentBatches {
    /// Start or stop holding batches (the engine's leadership); stopping drops what is held.
    pub fn enable(&self, on: bool) {
        if self.enabled.swap(on, Ordering::SeqCst) && !on {
            *self.held.lock().expect("recent batches lock") = Held::default();
        }
    }

    /// A committed batch: `samples` as the store was handed them, `written` as it reported.
    pub fn add(&self, samples: &Arc<[Sample]>, written: &[GpuWritten]) {
        if !self.enabled.load(Ordering::SeqCst) || written.is_empty() {
            return;
        }
        let mut held = self.held.lock().expect("recent batches lock");
        for w in written.iter().filter(|w| !w.filled) {
            held.samples += w.inserted.len();
            held.by_gpu.entry(w.gpu_id).or_default().push(HeldBatch {
                ingest_seq: w.ingest_seq,
                samples: samples.clone(),
                inserted: w.inserted.clone(),
            });
        }
        if held.samples > MAX_HELD_SAMPLES {
            *held = Held::default();
        }
    }

    /// The GPU's news after `judged` (the number up to which the engine has judged it; `None`:
    /// unknown) up to `stored` (its registry row's number now). What is taken is removed;
    /// batches numbered after what is taken stay for the next cycle. `may_wait`: a batch
    /// missing at the end of the run may still be on its way (return the run before it);
    /// otherwise a missing batch means the database.
    pub fn take(&self, gpu: GpuId, judged: Option<i64>, stored: i64, may_wait: bool) -> News {
        let mut held = self.held.lock().expect("recent batches lock");
        let mut list = held.by_gpu.remove(&gpu).unwrap_or_default();
        list.sort_by_key(|b| b.ingest_seq);
        let before: usize = list.iter().map(|b| b.inserted.len()).sum();
        // The run of consecutive numbers after the engine's.
        let run = judged.map_or(0, |judged| {
            list.iter()
                .skip_while(|b| b.ingest_seq <= judged)
                .zip(judged + 1..=stored)
                .take_while(|(b, expected)| b.ingest_seq == *expected)
                .count()
        });
        let (news, keep_after) = match judged {
            Some(judged) if stored <= judged => (News::None, stored),
            Some(judged) if run as i64 == stored - judged || may_wait => {
                let through = judged + run as i64;
                let batches = list.extract_if(.., |b| b.ingest_seq > judged && b.ingest_seq <= through).collect();
                (News::Held { batches, through }, through)
            }
            _ => (News::Database, stored),
        };
        // Anything not after what the engine will have judged is of no further use.
        list.retain(|b| b.ingest_seq > keep_after);
        held.samples -= before - list.iter().map(|b| b.inserted.len()).sum::<usize>();
        if !list.is_empty() {
            held.by_gpu.insert(gpu, list);
        }
        news
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ts_ms: i64) -> Sample {
        Sample { ts_ms, uuid: "GPU-a".into(), ..Default::default() }
    }

    fn written(gpu: i64, seq: i64, inserted: Vec<u32>) -> GpuWritten {
        GpuWritten { gpu_id: GpuId(gpu), ingest_seq: seq, inserted, filled: false }
    }

    fn ts(news: News) -> Vec<i64> {
        match news {
            News::Held { batches, .. } => batches.iter().flat_map(|b| b.samples().map(|s| s.ts_ms)).collect(),
            other => panic!("expected held batches, got {other:?}"),
        }
    }

    fn through(news: &News) -> i64 {
        match news {
            News::Held { through, .. } => *through,
            other => panic!("expected held batches, got {other:?}"),
        }
    }

    fn enabled() -> RecentBatches {
        let recent = RecentBatches::default();
        recent.enable(true);
        recent
    }

    #[test]
    fn every_batch_since_is_served_from_memory_in_sequence_order() {
        let recent = enabled();
        let a: Arc<[Sample]> = vec![sample(1), sample(2), sample(3)].into();
        let b: Arc<[Sample]> = vec![sample(4)].into();
        // Handed over out of order: the engine reads them in sequence.
        recent.add(&b, &[written(7, 6, vec![0])]);
        recent.add(&a, &[written(7, 5, vec![0, 2])]);
        let news = recent.take(GpuId(7), Some(4), 6, false);
        assert_eq!(through(&news), 6);
        assert_eq!(ts(news), vec![1, 3, 4]);
        assert!(matches!(recent.take(GpuId(7), Some(6), 6, false), News::None));
        // A new GPU's batches from its first (number 0).
        recent.add(&b, &[written(8, 0, vec![0])]);
        assert_eq!(ts(recent.take(GpuId(8), Some(-1), 0, false)), vec![4]);
        assert_eq!(recent.held.lock().unwrap().samples, 0);
    }

    #[test]
    fn a_missing_number_sends_the_engine_to_the_database() {
        let recent = enabled();
        let a: Arc<[Sample]> = vec![sample(1)].into();
        recent.add(&a, &[written(7, 5, vec![0])]);
        // Batch 4 was stored by another replica.
        assert!(matches!(recent.take(GpuId(7), Some(3), 5, false), News::Database));
        // What was held up to the row's number is gone either way.
        assert!(matches!(recent.take(GpuId(7), Some(5), 5, false), News::None));
        // An engine that does not know where it stands reads the database.
        recent.add(&a, &[written(7, 6, vec![0])]);
        assert!(matches!(recent.take(GpuId(7), None, 6, false), News::Database));
        assert_eq!(recent.held.lock().unwrap().samples, 0);
    }

    #[test]
    fn a_batch_on_its_way_is_waited_for_once() {
        let recent = enabled();
        let a: Arc<[Sample]> = vec![sample(1), sample(2), sample(3)].into();
        recent.add(&a, &[written(7, 1, vec![0])]);
        recent.add(&a, &[written(7, 3, vec![2])]);
        // The row says 3; batch 2 is committed but not handed over yet: batch 1 now, the rest
        // (batch 3 included) kept.
        let news = recent.take(GpuId(7), Some(0), 3, true);
        assert_eq!(through(&news), 1);
        assert_eq!(ts(news), vec![1]);
        recent.add(&a, &[written(7, 2, vec![1])]);
        assert_eq!(ts(recent.take(GpuId(7), Some(1), 3, false)), vec![2, 3]);
        // Not handed over by the next cycle either: the database.
        recent.add(&a, &[written(7, 5, vec![0])]);
        let news = recent.take(GpuId(7), Some(3), 5, true);
        assert_eq!(through(&news), 3);
        assert!(matches!(recent.take(GpuId(7), Some(3), 5, false), News::Database));
        assert_eq!(recent.held.lock().unwrap().samples, 0);
    }

    #[test]
    fn batches_committed_after_the_row_was_read_wait_for_the_next_cycle() {
        let recent = enabled();
        let a: Arc<[Sample]> = vec![sample(1), sample(2)].into();
        recent.add(&a, &[written(7, 1, vec![0])]);
        recent.add(&a, &[written(7, 2, vec![1])]);
        assert_eq!(ts(recent.take(GpuId(7), Some(0), 1, false)), vec![1]);
        assert_eq!(ts(recent.take(GpuId(7), Some(1), 2, false)), vec![2]);
    }

    #[test]
    fn a_filled_batch_or_a_disabled_replica_holds_nothing() {
        let recent = RecentBatches::default();
        let a: Arc<[Sample]> = vec![sample(1)].into();
        recent.add(&a, &[written(7, 1, vec![0])]);
        assert!(matches!(recent.take(GpuId(7), Some(0), 1, false), News::Database));
        recent.enable(true);
        recent.add(&a, &[GpuWritten { filled: true, ..written(7, 2, vec![0]) }]);
        assert!(matches!(recent.take(GpuId(7), Some(1), 2, false), News::Database));
        recent.add(&a, &[written(7, 3, vec![0])]);
        recent.enable(false);
        recent.enable(true);
        assert!(matches!(recent.take(GpuId(7), Some(2), 3, false), News::Database));
    }

    #[test]
    fn past_the_cap_everything_held_is_dropped() {
        let recent = enabled();
        let many: Arc<[Sample]> = (0..1000).map(sample).collect::<Vec<_>>().into();
        let all: Vec<u32> = (0..1000).collect();
        for seq in 1..=(MAX_HELD_SAMPLES / 1000 + 1) as i64 {
            recent.add(&many, &[written(7, seq, all.clone())]);
        }
        assert!(matches!(recent.take(GpuId(7), Some(0), 201, false), News::Database));
        assert_eq!(recent.held.lock().unwrap().samples, 0);
    }
}
