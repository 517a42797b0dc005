//! Which jobs are on the GPUs: ingest hands each stored batch's process owners to
//! [`JobTracker::add`] (memory only, no IO on the ingest path); every replica writes what it
//! saw to `job_runs` every few seconds ([`flush_loop`]). Sightings merge by min/max, so the
//! order and the replica they come through do not matter.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetlens_core::jobcard::{global_run_key, run_key};
use fleetlens_core::{ProcessOwner, Sample};
use fleetlens_store::actions::JobSighting;
use fleetlens_store::{OrgId, Store};

use crate::time::now_ms;

/// Runs whose sightings wait for the next flush, at most (beyond it new runs are dropped
/// until the flush: a bound on memory whatever agents send).
const MAX_PENDING: usize = 100_000;

/// The runs of a batch's samples: one sighting per run key, with the GPUs and times it was seen.
pub fn sightings(host: &str, samples: &[Sample]) -> Vec<JobSighting> {
    let mut by_key: HashMap<String, (ProcessOwner, BTreeSet<String>, i64, i64)> = HashMap::new();
    for s in samples {
        // The holders: a pod the kubelet allocated the GPU to is a run even with no process seen.
        let Some(holders) = s.holders() else { continue };
        for p in holders.iter() {
            let Some(local) = run_key(p) else { continue };
            let key = global_run_key(host, &local);
            let e = by_key.entry(key).or_insert_with(|| {
                let mut owner = p.owner.clone().unwrap_or_default();
                // The pod's declared owner, else the Unix user, else the Slurm job's user.
                owner.user =
                    owner.pod_user.clone().or(owner.user).or_else(|| p.user.clone()).or_else(|| owner.job_user.clone());
                (owner, BTreeSet::new(), s.ts_ms, s.ts_ms)
            });
            e.1.insert(s.uuid.trim().to_string());
            e.2 = e.2.min(s.ts_ms);
            e.3 = e.3.max(s.ts_ms);
        }
    }
    by_key
        .into_iter()
        .map(|(run_key, (owner, gpus, first_ms, last_ms))| JobSighting {
            run_key,
            host: host.to_string(),
            owner,
            gpu_uuids: gpus.into_iter().collect(),
            first_ms,
            last_ms,
        })
        .collect()
}

/// Sightings not yet written, per organisation and run key.
#[derive(Debug, Default)]
pub struct JobTracker {
    pending: Mutex<HashMap<(OrgId, String), JobSighting>>,
}

impl JobTracker {
    /// Merge a stored batch's sightings.
    pub fn add(&self, org: OrgId, sightings: Vec<JobSighting>) {
        let mut pending = self.pending.lock().expect("tracker lock");
        for s in sightings {
            let key = (org, s.run_key.clone());
            let room = pending.len() < MAX_PENDING;
            match pending.get_mut(&key) {
                Some(p) => merge(p, &s),
                None if room => {
                    pending.insert(key, s);
                }
                None => {}
            }
        }
    }

    fn take(&self) -> HashMap<(OrgId, String), JobSighting> {
        std::mem::take(&mut *self.pending.lock().expect("tracker lock"))
    }

    /// Write everything seen so far; what fails to be written waits for the next flush.
    pub async fn flush(&self, store: &dyn Store, rejoin_ms: i64) {
        let taken = self.take();
        if taken.is_empty() {
            return;
        }
        let mut by_org: HashMap<OrgId, Vec<JobSighting>> = HashMap::new();
        for ((org, _), s) in taken {
            by_org.entry(org).or_default().push(s);
        }
        for (org, list) in by_org {
            if let Err(e) = store.record_job_sightings(org, &list, rejoin_ms, now_ms()).await {
                tracing::warn!(error = %e, "job runs: cannot record sightings; retrying at the next flush");
                self.add(org, list);
            }
        }
    }
}

fn merge(into: &mut JobSighting, s: &JobSighting) {
    into.first_ms = into.first_ms.min(s.first_ms);
    into.last_ms = into.last_ms.max(s.last_ms);
    into.gpu_uuids = fleetlens_store::actions::union(&into.gpu_uuids, &s.gpu_uuids);
}

/// How often each replica writes its sightings.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(2);

/// Flush every [`FLUSH_INTERVAL`] (every replica: each writes what it received).
pub async fn flush_loop(tracker: Arc<JobTracker>, store: Arc<dyn Store>, rejoin_ms: i64) {
    loop {
        tokio::time::sleep(FLUSH_INTERVAL).await;
        tracker.flush(store.as_ref(), rejoin_ms).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetlens_core::GpuProcess;

    fn sample(uuid: &str, ts: i64, procs: Vec<GpuProcess>) -> Sample {
        Sample { ts_ms: ts, uuid: uuid.into(), processes: Some(procs), ..Default::default() }
    }

    fn proc(pid: u32, owner: ProcessOwner) -> GpuProcess {
        GpuProcess { pid, owner: Some(owner), ..Default::default() }
    }

    #[test]
    fn a_batch_gives_one_sighting_per_run() {
        let slurm = ProcessOwner { job_id: Some("7".into()), job_user: Some("dave".into()), ..Default::default() };
        let alice = ProcessOwner { user: Some("alice".into()), ..Default::default() };
        let samples = vec![
            sample("GPU-a", 1_000, vec![proc(10, slurm.clone()), proc(11, alice.clone())]),
            sample("GPU-b", 2_000, vec![proc(12, slurm.clone())]),
            sample("GPU-a", 3_000, vec![proc(10, slurm.clone())]),
            Sample { ts_ms: 4_000, uuid: "GPU-c".into(), processes: None, ..Default::default() },
            sample("GPU-c", 5_000, vec![GpuProcess { pid: 99, ..Default::default() }]),
        ];
        let mut got = sightings("node-1", &samples);
        got.sort_by(|a, b| a.run_key.cmp(&b.run_key));
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].run_key, "pid:node-1/11");
        assert_eq!(got[0].owner.user.as_deref(), Some("alice"));
        assert_eq!((got[0].first_ms, got[0].last_ms), (1_000, 1_000));
        assert_eq!(got[1].run_key, "slurm:7");
        assert_eq!(got[1].gpu_uuids, ["GPU-a", "GPU-b"]);
        assert_eq!((got[1].first_ms, got[1].last_ms), (1_000, 3_000));
        // The Slurm job's user stands in for the Unix user.
        assert_eq!(got[1].owner.user.as_deref(), Some("dave"));

        // A GPU the kubelet gave a JobSet's pod, no process seen: the job is a run, its pod's
        // declared owner its user.
        let held = Sample {
            ts_ms: 6_000,
            uuid: "GPU-d".into(),
            processes: Some(vec![]),
            allocations: vec![fleetlens_core::PodAllocation {
                namespace: "ml".into(),
                pod: "llm-workers-0-0".into(),
                pod_user: Some("erin".into()),
                job_kind: Some("JobSet".into()),
                job_name: Some("llm".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let k8s = sightings("node-2", &[held]);
        assert_eq!(k8s.len(), 1, "{k8s:?}");
        assert_eq!(k8s[0].run_key, "jobset:ml/llm");
        assert_eq!(k8s[0].owner.user.as_deref(), Some("erin"));
        assert_eq!(k8s[0].owner.job_kind.as_deref(), Some("JobSet"));

        let tracker = JobTracker::default();
        tracker.add(OrgId(1), got.clone());
        let mut later = got[1].clone();
        later.gpu_uuids = vec!["GPU-z".into()];
        later.last_ms = 9_000;
        tracker.add(OrgId(1), vec![later]);
        let taken = tracker.take();
        let s = &taken[&(OrgId(1), "slurm:7".to_string())];
        assert_eq!(s.gpu_uuids, ["GPU-a", "GPU-b", "GPU-z"]);
        assert_eq!((s.first_ms, s.last_ms), (1_000, 9_000));
        assert!(tracker.take().is_empty());
    }
}
