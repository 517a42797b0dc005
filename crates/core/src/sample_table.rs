//! Samples as columns: one list of values per signal instead of one struct per sample. The
//! store decodes a sealed block straight into this (a block is column by column already), and
//! `GET /gpus/{uuid}/samples?format=columns` sends it as it is: an hour of 3,600 samples then
//! never becomes 3,600 [`Sample`] structs, each with its own process lists, only to be taken
//! apart into columns again.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::signal::{Precision, SIGNALS, Signal};
use crate::{GpuProcess, PodAllocation, Sample};

/// One signal's values, one per sample (`None`: not measured): integers for the signals kept
/// exactly (bytes, counts, a bitmask as its 64 bits), reals for the others.
#[derive(Debug, Clone, PartialEq)]
pub enum SignalValues {
    Integers(Vec<Option<i64>>),
    Reals(Vec<Option<f64>>),
}

impl SignalValues {
    /// An empty column of `signal`'s kind.
    pub fn of(signal: &Signal) -> Self {
        match signal.precision {
            Precision::Exact => SignalValues::Integers(Vec::new()),
            Precision::Scaled(_) => SignalValues::Reals(Vec::new()),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            SignalValues::Integers(v) => v.len(),
            SignalValues::Reals(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push(&mut self, signal: &Signal, s: &Sample) {
        match self {
            SignalValues::Integers(v) => v.push((signal.get_int)(s)),
            SignalValues::Reals(v) => v.push((signal.get)(s)),
        }
    }

    /// Value `i` into `s` (the inverse of [`Self::push`]).
    fn set(&self, signal: &Signal, i: usize, s: &mut Sample) {
        match self {
            SignalValues::Integers(v) => (signal.set_int)(s, v[i]),
            SignalValues::Reals(v) => (signal.set)(s, v[i]),
        }
    }

    fn keep(&mut self, range: Range<usize>) {
        match self {
            SignalValues::Integers(v) => keep(v, range),
            SignalValues::Reals(v) => keep(v, range),
        }
    }

    fn append(&mut self, other: SignalValues) {
        match (self, other) {
            (SignalValues::Integers(a), SignalValues::Integers(mut b)) => a.append(&mut b),
            (SignalValues::Reals(a), SignalValues::Reals(mut b)) => a.append(&mut b),
            // Both made by `of` for the same signal.
            _ => unreachable!("columns of one signal have one kind"),
        }
    }
}

/// The processes of a [`SampleTable`]: one row per process per sample, in the samples' order.
/// A process's identity (pid, command, user, container, owner) is given once in `identities`;
/// its readings, which change every sample, are columns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProcessColumns {
    /// Per row: the process, as its index in `identities`.
    pub process: Vec<u32>,
    /// Per row: GPU memory the process held, bytes (null where not read).
    pub used_bytes: Vec<Option<i64>>,
    /// Per row: the process's share of SM time, % (null where not read).
    pub sm_pct: Vec<Option<f64>>,
    /// The processes, without their readings (`used_bytes` and `sm_pct` null).
    pub identities: Vec<GpuProcess>,
}

/// How many of the newest process identities a process is compared with before it is added as
/// new: more than a GPU runs at once, so a process seen in the previous sample is found.
const RECENT_PROCESSES: usize = 64;

/// How many of the newest lists a sample's list is compared with before it is added as new:
/// bounded, so that samples whose lists all differ (per-process readings that change every
/// second) cost a few comparisons each, not one per list so far.
const RECENT_LISTS: usize = 8;

impl ProcessColumns {
    /// Add one process of one sample.
    pub fn push(&mut self, p: &GpuProcess) {
        let recent = self.identities.len().saturating_sub(RECENT_PROCESSES);
        // Compared in place: a process seen before (nearly every row) is not cloned.
        let index = match self.identities[recent..].iter().rposition(|known| known.same_identity(p)) {
            Some(i) => recent + i,
            None => {
                self.identities.push(GpuProcess { used_bytes: None, sm_pct: None, ..p.clone() });
                self.identities.len() - 1
            }
        };
        self.process.push(index as u32);
        self.used_bytes.push(p.used_bytes);
        self.sm_pct.push(p.sm_pct);
    }

    /// The process list of each sample, given the table's `process_count`: the rows back as
    /// the `processes` of the samples.
    pub fn lists(&self, process_count: &[Option<u32>]) -> Vec<Option<Vec<GpuProcess>>> {
        let mut row = 0;
        process_count
            .iter()
            .map(|count| {
                let count = (*count)? as usize;
                let list = (row..row + count).map(|r| self.row(r)).collect();
                row += count;
                Some(list)
            })
            .collect()
    }

    /// Row `r` as the process it is.
    fn row(&self, r: usize) -> GpuProcess {
        GpuProcess {
            used_bytes: self.used_bytes[r],
            sm_pct: self.sm_pct[r],
            ..self.identities[self.process[r] as usize].clone()
        }
    }

    fn keep(&mut self, rows: Range<usize>) {
        keep(&mut self.process, rows.clone());
        keep(&mut self.used_bytes, rows.clone());
        keep(&mut self.sm_pct, rows);
    }
}

/// Samples of one GPU as columns, ascending by time. Entry `i` of every per-sample list
/// belongs to the sample at `ts_ms[i]`; the identity fields (uuid, index, name) are not kept.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleTable {
    pub ts_ms: Vec<i64>,
    /// One column per signal of [`SIGNALS`], in its order.
    pub signals: Vec<SignalValues>,
    /// Per sample: how many rows of `processes` are its (they follow the previous sample's);
    /// `None` where the GPU reported no process list, 0 for an empty one.
    pub process_count: Vec<Option<u32>>,
    pub processes: ProcessColumns,
    /// The pod-allocation lists the samples refer to; the first is always the empty one.
    pub allocation_lists: Vec<Vec<PodAllocation>>,
    /// Per sample: its allocations in `allocation_lists`.
    pub allocations: Vec<u32>,
}

impl Default for SampleTable {
    fn default() -> Self {
        SampleTable {
            ts_ms: Vec::new(),
            signals: SIGNALS.iter().map(SignalValues::of).collect(),
            process_count: Vec::new(),
            processes: ProcessColumns::default(),
            allocation_lists: vec![Vec::new()],
            allocations: Vec::new(),
        }
    }
}

impl SampleTable {
    /// The columns of `samples` (ascending by time).
    pub fn from_samples(samples: &[Sample]) -> Self {
        let mut table = SampleTable::default();
        for s in samples {
            table.push(s);
        }
        table
    }

    pub fn len(&self) -> usize {
        self.ts_ms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ts_ms.is_empty()
    }

    /// Add `s` after the samples held (it must be newer than them).
    pub fn push(&mut self, s: &Sample) {
        self.ts_ms.push(s.ts_ms);
        for (column, signal) in self.signals.iter_mut().zip(SIGNALS) {
            column.push(signal, s);
        }
        self.process_count.push(s.processes.as_ref().map(|list| {
            for p in list {
                self.processes.push(p);
            }
            list.len() as u32
        }));
        let allocations = index_of(&mut self.allocation_lists, &s.allocations);
        self.allocations.push(allocations);
    }

    /// The samples again, with empty identity fields.
    pub fn into_samples(self) -> Vec<Sample> {
        let mut lists = self.processes.lists(&self.process_count).into_iter();
        (0..self.len())
            .map(|i| {
                let mut s = Sample { ts_ms: self.ts_ms[i], ..Default::default() };
                for (column, signal) in self.signals.iter().zip(SIGNALS) {
                    column.set(signal, i, &mut s);
                }
                s.processes = lists.next().flatten();
                s.allocations = self.allocation_lists[self.allocations[i] as usize].clone();
                s
            })
            .collect()
    }

    /// Keep samples `range` alone. (Lists of processes and allocations that only the dropped
    /// samples used stay listed: nothing refers to them.)
    pub fn keep(&mut self, range: Range<usize>) {
        let range = range.start.min(self.len())..range.end.min(self.len());
        let rows_before: usize = self.process_count[..range.start].iter().flatten().map(|&n| n as usize).sum();
        let rows: usize = self.process_count[range.clone()].iter().flatten().map(|&n| n as usize).sum();
        self.processes.keep(rows_before..rows_before + rows);
        keep(&mut self.ts_ms, range.clone());
        for column in &mut self.signals {
            column.keep(range.clone());
        }
        keep(&mut self.process_count, range.clone());
        keep(&mut self.allocations, range);
    }

    /// Keep the samples in `[from_ms, to_ms)`.
    pub fn keep_time(&mut self, from_ms: i64, to_ms: i64) {
        let start = self.ts_ms.partition_point(|&t| t < from_ms);
        let end = self.ts_ms.partition_point(|&t| t < to_ms);
        self.keep(start..end.max(start));
    }

    /// Add `other`'s samples after these (they must be newer).
    pub fn append(&mut self, mut other: SampleTable) {
        self.ts_ms.append(&mut other.ts_ms);
        for (column, theirs) in self.signals.iter_mut().zip(other.signals) {
            column.append(theirs);
        }
        self.process_count.append(&mut other.process_count);
        let offset = self.processes.identities.len() as u32;
        self.processes.process.extend(other.processes.process.iter().map(|&p| p + offset));
        self.processes.used_bytes.append(&mut other.processes.used_bytes);
        self.processes.sm_pct.append(&mut other.processes.sm_pct);
        self.processes.identities.append(&mut other.processes.identities);
        // Their first list is the empty one, which is ours too.
        let offset = self.allocation_lists.len() as u32 - 1;
        self.allocations.extend(other.allocations.iter().map(|&a| if a == 0 { 0 } else { a + offset }));
        self.allocation_lists.extend(other.allocation_lists.into_iter().skip(1));
    }
}

/// Keep `range` of `v`.
fn keep<T>(v: &mut Vec<T>, range: Range<usize>) {
    v.truncate(range.end);
    v.drain(..range.start);
}

/// The index of `list` among the newest [`RECENT_LISTS`] of `lists`, or of it added at the end.
fn index_of<T: Clone + PartialEq>(lists: &mut Vec<Vec<T>>, list: &[T]) -> u32 {
    let recent = lists.len().saturating_sub(RECENT_LISTS);
    match lists[recent..].iter().rposition(|l| l.as_slice() == list) {
        Some(i) => (recent + i) as u32,
        None => {
            lists.push(list.to_vec());
            (lists.len() - 1) as u32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ts_ms: i64, pid: Option<u32>, pod: Option<&str>) -> Sample {
        Sample {
            ts_ms,
            gpu_util_pct: Some(ts_ms as f64 / 2.0),
            throttle_reasons: (ts_ms % 2 == 0).then_some(1 << 63),
            processes: pid.map(|pid| vec![GpuProcess { pid, used_bytes: Some(ts_ms * 10), ..Default::default() }]),
            allocations: pod
                .map(|pod| vec![PodAllocation { pod: pod.into(), ..Default::default() }])
                .unwrap_or_default(),
            ..Default::default()
        }
    }

    fn samples() -> Vec<Sample> {
        vec![
            sample(1, Some(7), None),
            sample(2, Some(7), Some("a")),
            sample(3, None, Some("a")),
            sample(4, Some(8), None),
            sample(5, Some(7), Some("b")),
        ]
    }

    #[test]
    fn samples_round_trip_through_columns() {
        let table = SampleTable::from_samples(&samples());
        assert_eq!(table.len(), 5);
        assert_eq!(table.processes.identities.iter().map(|p| p.pid).collect::<Vec<_>>(), [7, 8], "each process once");
        assert_eq!(table.allocation_lists.len(), 3, "the empty list, then a and b once each");
        assert_eq!(table.into_samples(), samples());
    }

    #[test]
    fn keeping_a_range_keeps_its_processes_and_allocations() {
        for (from, to) in [(0, 6), (2, 4), (3, 4), (4, 6), (6, 9), (0, 1), (3, 3)] {
            let mut table = SampleTable::from_samples(&samples());
            table.keep_time(from, to);
            let want: Vec<Sample> = samples().into_iter().filter(|s| s.ts_ms >= from && s.ts_ms < to).collect();
            assert_eq!(table.into_samples(), want, "[{from}, {to})");
        }
        let mut table = SampleTable::from_samples(&samples());
        table.keep(0..99);
        assert_eq!(table.len(), 5, "a range past the end keeps what there is");
    }

    #[test]
    fn appended_tables_read_as_one() {
        let all = samples();
        for split in 0..=all.len() {
            let mut table = SampleTable::from_samples(&all[..split]);
            table.append(SampleTable::from_samples(&all[split..]));
            assert_eq!(table.allocation_lists[0], Vec::new(), "the first list stays the empty one");
            assert_eq!(table.into_samples(), all, "split at {split}");
        }
    }

    #[test]
    fn lists_that_all_differ_cost_a_bounded_search() {
        let mut lists: Vec<Vec<u32>> = Vec::new();
        for i in 0..100 {
            assert_eq!(index_of(&mut lists, &[i]), i);
        }
        // Seen recently: found; seen long ago: added again (still the same list).
        assert_eq!(index_of(&mut lists, &[97]), 97);
        assert_eq!(index_of(&mut lists, &[3]), 100);
        assert_eq!(lists[100], [3]);
    }
}
