//! One GPU reading at one instant: the fields of the trace format in
//! `tests/fixtures/README.md` plus the process list.

use serde::{Deserialize, Serialize};

/// A GPU sample. Every measurement is optional: `None` means "not measured on this GPU",
/// which is never the same as 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Sample {
    /// Sample time, Unix milliseconds.
    pub ts_ms: i64,
    /// Stable GPU identity (NVML UUID, e.g. `GPU-b8c24ac0-…`; MIG instances `MIG-…`).
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub gpu_index: Option<u32>,
    /// Model name as NVML reports it, e.g. `NVIDIA H200`.
    #[serde(default)]
    pub name: Option<String>,

    /// Kernel utilization: % of time at least one kernel ran.
    #[serde(default)]
    pub gpu_util_pct: Option<f64>,
    /// Memory-controller busy time, %.
    #[serde(default)]
    pub mem_util_pct: Option<f64>,
    #[serde(default)]
    pub mem_used_bytes: Option<i64>,
    #[serde(default)]
    pub mem_total_bytes: Option<i64>,
    #[serde(default)]
    pub power_w: Option<f64>,
    #[serde(default)]
    pub power_limit_w: Option<f64>,
    /// Monotonic energy counter since driver load, joules.
    #[serde(default)]
    pub energy_j: Option<f64>,
    #[serde(default)]
    pub temp_c: Option<f64>,
    #[serde(default)]
    pub sm_clock_mhz: Option<f64>,
    /// NVML clock-event (throttle) reasons bitmask.
    #[serde(default)]
    pub throttle_reasons: Option<u64>,

    /// SM activity (SMACT): % of SMs busy, averaged over the interval.
    #[serde(default)]
    pub sm_active_pct: Option<f64>,
    /// Graphics engine active (GRACT).
    #[serde(default)]
    pub gr_engine_active_pct: Option<f64>,
    /// SM occupancy (SMOCC): resident warps / maximum warps, %.
    #[serde(default)]
    pub sm_occupancy_pct: Option<f64>,
    #[serde(default)]
    pub tensor_active_pct: Option<f64>,
    #[serde(default)]
    pub dram_active_pct: Option<f64>,
    #[serde(default)]
    pub fp16_active_pct: Option<f64>,
    /// HMMA tensor pipe (FP16/BF16 matrix multiply-accumulate on the tensor cores), % busy.
    #[serde(default)]
    pub tensor_hmma_active_pct: Option<f64>,
    #[serde(default)]
    pub fp32_active_pct: Option<f64>,
    #[serde(default)]
    pub fp64_active_pct: Option<f64>,
    #[serde(default)]
    pub int_active_pct: Option<f64>,
    #[serde(default)]
    pub pcie_tx_mib_s: Option<f64>,
    #[serde(default)]
    pub pcie_rx_mib_s: Option<f64>,
    #[serde(default)]
    pub nvlink_tx_mib_s: Option<f64>,
    #[serde(default)]
    pub nvlink_rx_mib_s: Option<f64>,

    /// Compute processes on the GPU at sample time. `None`: the list could not be read;
    /// `Some(vec![])`: read, and nobody is on the GPU.
    #[serde(default, deserialize_with = "bounded_processes")]
    pub processes: Option<Vec<GpuProcess>>,
    /// Pods the kubelet has allocated this GPU to (its PodResources API, read by the agent's
    /// `--kubelet-socket`), whether or not their processes are visible. Empty (left out of the
    /// JSON) where the agent does not ask a kubelet or the GPU is allocated to no pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<PodAllocation>,
}

/// A GPU allocated to one container of a pod by the kubelet's device manager (PodResources v1
/// `List`): the pod holds the GPU whether or not its processes run, or can be seen, on it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PodAllocation {
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name within the pod.
    #[serde(default)]
    pub container: String,
    /// Extended resource the device was allocated as: `nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`,
    /// a renamed shared resource (`nvidia.com/gpu.shared`) …
    #[serde(default)]
    pub resource: String,
    /// The device plugin's device id as the kubelet lists it (`GPU-<uuid>`, `MIG-<uuid>`,
    /// `GPU-<uuid>::<n>` for a time-sliced replica, or an index).
    #[serde(default)]
    pub device_id: String,
    /// From the Kubernetes API (the agent's `--kube-metadata`), left out where unknown: the team
    /// of the pod's namespace (its `fleetlens.io/team` label, or the configured one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// The pod's owner: its `app.kubernetes.io/part-of` label, or the configured label or
    /// annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_user: Option<String>,
    /// The job the pod runs for, from its owner references: its kind (`Job`, `JobSet`,
    /// `RayJob`, `PyTorchJob`, … or Kueue's `Workload`) and its name in the pod's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
}

impl PodAllocation {
    /// The Kubernetes metadata as a process owner's fields (pod, namespace, team, pod user,
    /// job as `namespace/name` with its kind).
    pub fn owner(&self) -> ProcessOwner {
        let known = |v: &str| Some(v.to_string()).filter(|s| !s.is_empty());
        ProcessOwner {
            namespace: known(&self.namespace),
            pod_name: known(&self.pod),
            team: self.team.clone(),
            pod_user: self.pod_user.clone(),
            job_id: self.job_name.as_ref().map(|j| format!("{}/{j}", self.namespace)),
            job_kind: self.job_name.as_ref().and(self.job_kind.clone()),
            ..ProcessOwner::default()
        }
    }
}

/// Most pod allocations one sample may carry (time-slicing gives a GPU out many times).
pub const MAX_ALLOCATIONS_PER_SAMPLE: usize = 256;

/// Most processes one sample may list. Decoding stops at the next one, so a hostile batch
/// cannot make its reader allocate millions of them (each ~330 bytes in memory, from ~10 bytes
/// of JSON) before validation; validation refuses the same.
pub const MAX_PROCESSES_PER_SAMPLE: usize = 4096;

/// `processes`, null or a list of at most [`MAX_PROCESSES_PER_SAMPLE`].
fn bounded_processes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<GpuProcess>>, D::Error> {
    use serde::de::{Error, SeqAccess, Visitor};
    struct List;
    impl<'de> Visitor<'de> for List {
        type Value = Vec<GpuProcess>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a list of at most {MAX_PROCESSES_PER_SAMPLE} processes")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
            while let Some(p) = seq.next_element()? {
                if out.len() == MAX_PROCESSES_PER_SAMPLE {
                    return Err(A::Error::custom(format!("more than {MAX_PROCESSES_PER_SAMPLE} processes on one GPU")));
                }
                out.push(p);
            }
            Ok(out)
        }
    }
    struct Nullable;
    impl<'de> Visitor<'de> for Nullable {
        type Value = Option<Vec<GpuProcess>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "null or a list of at most {MAX_PROCESSES_PER_SAMPLE} processes")
        }
        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: serde::Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_seq(List).map(Some)
        }
    }
    d.deserialize_option(Nullable)
}

/// A process holding the GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuProcess {
    pub pid: u32,
    /// GPU memory the process holds, bytes.
    #[serde(default)]
    pub used_bytes: Option<i64>,
    /// The process's share of SM time from NVML process utilization samples, %.
    #[serde(default)]
    pub sm_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Container or cgroup id from /proc/<pid>/cgroup, where visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// Who the process belongs to, as far as the host can tell; `null` where the agent could
    /// not read /proc for it (or an older agent sent the sample). Left out of the JSON when
    /// absent, like `command`, `user` and `container_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<ProcessOwner>,
}

impl GpuProcess {
    /// The same process (pid, command, user, container, owner), whatever its readings.
    pub fn same_identity(&self, other: &GpuProcess) -> bool {
        // Destructured, so that a field added later must be placed on one side or the other.
        let GpuProcess { pid, used_bytes: _, sm_pct: _, command, user, container_id, owner } = self;
        *pid == other.pid
            && *command == other.command
            && *user == other.user
            && *container_id == other.container_id
            && *owner == other.owner
    }
}

/// The owner of a GPU process, from `/proc/<pid>/{status,cgroup,environ}`. Every field is
/// `null` where the host cannot tell: nothing is guessed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProcessOwner {
    /// Unix user name of the process's real UID (the UID itself where /etc/passwd has no name).
    #[serde(default)]
    pub user: Option<String>,
    /// Container from the cgroup path: `docker://<id>`, `containerd://<id>`, `cri-o://<id>`,
    /// `podman://<id>`, `lxc://<name>`, or a bare 64-hex id.
    #[serde(default)]
    pub container_id: Option<String>,
    /// Kubernetes pod UID from the cgroup path (`kubepods…pod<uid>`).
    #[serde(default)]
    pub pod_uid: Option<String>,
    /// Pod name and namespace: only where the process environment carries them (the pod spec
    /// sets `POD_NAME` / `POD_NAMESPACE` through the downward API); kubelet does not.
    #[serde(default)]
    pub pod_name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    /// Slurm job id, user and partition (`SLURM_JOB_ID`, `SLURM_JOB_USER`,
    /// `SLURM_JOB_PARTITION` of the process environment; the job id also from the cgroup path).
    /// A Kubernetes job (see `job_kind`): `namespace/name`.
    #[serde(default)]
    pub job_id: Option<String>,
    #[serde(default)]
    pub job_user: Option<String>,
    #[serde(default)]
    pub job_partition: Option<String>,
    /// `--label-from-env VAR` values: variable name → value, for the variables the process has.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The kind of a Kubernetes job (`Job`, `JobSet`, `RayJob`, `PyTorchJob`, `Workload`, …)
    /// named by `job_id`; absent for a Slurm job. From the pod's owner references (the agent's
    /// `--kube-metadata`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_kind: Option<String>,
    /// The team of the pod's namespace (its `fleetlens.io/team` label, or the configured one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// The pod's owner from its Kubernetes metadata (`app.kubernetes.io/part-of`, or the
    /// configured label or annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_user: Option<String>,
}

impl ProcessOwner {
    /// True when nothing at all is known.
    pub fn is_empty(&self) -> bool {
        *self == ProcessOwner::default()
    }

    /// Every text field with its name (for validation and alert labels).
    pub fn fields(&self) -> [(&'static str, Option<&str>); 11] {
        [
            ("user", self.user.as_deref()),
            ("container_id", self.container_id.as_deref()),
            ("pod_uid", self.pod_uid.as_deref()),
            ("pod_name", self.pod_name.as_deref()),
            ("namespace", self.namespace.as_deref()),
            ("job_id", self.job_id.as_deref()),
            ("job_user", self.job_user.as_deref()),
            ("job_partition", self.job_partition.as_deref()),
            ("job_kind", self.job_kind.as_deref()),
            ("team", self.team.as_deref()),
            ("pod_user", self.pod_user.as_deref()),
        ]
    }
}

/// Accessor of one optional float field of a sample.
pub type FloatField = (&'static str, fn(&Sample) -> Option<f64>);

/// Percentage fields, by their METRICS.md names, with accessors: the signals in `%` (from the
/// signal table, so a new one is validated without an edit here). Used by validation and by
/// storage code that treats them uniformly.
pub const PERCENT_FIELDS: [FloatField; crate::signal::count_units(PERCENT_UNITS)] =
    crate::signal::fields_with_units(PERCENT_UNITS);
const PERCENT_UNITS: &[&str] = &["%"];

impl Sample {
    /// True when at least one application process holds the GPU, or the kubelet has allocated
    /// it to a pod (allocation utilization: an allocated GPU is paid for by its pod even with no
    /// process on it).
    pub fn is_allocated(&self) -> bool {
        self.processes.as_ref().is_some_and(|p| !p.is_empty()) || !self.allocations.is_empty()
    }

    /// True when it is known who holds the GPU: the process list was read, or the kubelet
    /// named the pods it is allocated to.
    pub fn holders_known(&self) -> bool {
        self.processes.is_some() || !self.allocations.is_empty()
    }

    /// The GPU's holders for owner accounting and alert owner fields: the process list with
    /// the kubelet's allocations folded in ([`holders`]).
    pub fn holders(&self) -> Option<std::borrow::Cow<'_, [GpuProcess]>> {
        holders(self.processes.as_deref(), &self.allocations)
    }

    /// Efficiency score: SMACT / kernel utilization × 100, capped at 100; undefined (None)
    /// when kernel utilization is 0 or either signal is absent.
    pub fn efficiency(&self) -> Option<f64> {
        crate::efficiency(self.sm_active_pct, self.gpu_util_pct)
    }
}

/// Non-negative float fields that are not percentages (watts, joules, MHz, MiB/s): the signals in
/// those units, from the signal table.
pub const NON_NEGATIVE_FIELDS: [FloatField; crate::signal::count_units(NON_NEGATIVE_UNITS)] =
    crate::signal::fields_with_units(NON_NEGATIVE_UNITS);
const NON_NEGATIVE_UNITS: &[&str] = &["W", "J", "MHz", "MiB/s"];

/// The holders of a GPU: its processes, with what the kubelet says folded in.
///
/// - No allocation: the process list as it is (`None` when not read).
/// - Allocated to pods and no process seen (none on the GPU, or the list not read): one holder
///   per allocated pod, pid 0, owned by that pod, so its time is the pod's (an allocated, idle
///   GPU is `idle_held` by its pod, not nobody's).
/// - Allocated to exactly one pod: processes that name no pod (their /proc could not be read,
///   or their environment has no `POD_NAME`) get that pod's name and namespace; the device
///   plugin gives the GPU to that pod alone. Processes already naming a pod keep it.
/// - Allocated to several pods (time-slicing) with processes seen: the processes as they are;
///   which replica a process uses is not known.
pub fn holders<'a>(
    processes: Option<&'a [GpuProcess]>,
    allocations: &[PodAllocation],
) -> Option<std::borrow::Cow<'a, [GpuProcess]>> {
    use std::borrow::Cow;
    // One allocation per pod (time-slicing lists a pod once per replica).
    let mut pods: Vec<&PodAllocation> = allocations.iter().collect();
    pods.sort_unstable_by(|a, b| (&a.namespace, &a.pod).cmp(&(&b.namespace, &b.pod)));
    pods.dedup_by(|a, b| (&a.namespace, &a.pod) == (&b.namespace, &b.pod));
    match (processes, pods.as_slice()) {
        (p, []) => p.map(Cow::Borrowed),
        (None | Some([]), pods) => Some(Cow::Owned(
            pods.iter().map(|a| GpuProcess { pid: 0, owner: Some(a.owner()), ..GpuProcess::default() }).collect(),
        )),
        (Some(procs), [pod]) => {
            let names_no_pod =
                |p: &GpuProcess| p.owner.as_ref().is_none_or(|o| o.pod_name.is_none() && o.namespace.is_none());
            let of_pod = |p: &GpuProcess| {
                p.owner.as_ref().is_some_and(|o| {
                    o.namespace.as_deref() == Some(pod.namespace.as_str())
                        && o.pod_name.as_deref() == Some(pod.pod.as_str())
                })
            };
            // The pod's metadata (team, pod user, job) that its processes do not carry yet.
            let lacks_meta = |p: &GpuProcess| {
                let meta = pod.owner();
                of_pod(p)
                    && p.owner.as_ref().is_some_and(|o| {
                        (o.team.is_none() && meta.team.is_some())
                            || (o.pod_user.is_none() && meta.pod_user.is_some())
                            || (o.job_id.is_none() && meta.job_id.is_some())
                    })
            };
            if !procs.iter().any(|p| names_no_pod(p) || lacks_meta(p)) {
                return Some(Cow::Borrowed(procs));
            }
            Some(Cow::Owned(
                procs
                    .iter()
                    .map(|p| {
                        let mut p = p.clone();
                        if names_no_pod(&p) || of_pod(&p) {
                            let meta = pod.owner();
                            let o = p.owner.get_or_insert_with(ProcessOwner::default);
                            o.namespace = o.namespace.take().or(meta.namespace);
                            o.pod_name = o.pod_name.take().or(meta.pod_name);
                            o.team = o.team.take().or(meta.team);
                            o.pod_user = o.pod_user.take().or(meta.pod_user);
                            if o.job_id.is_none() {
                                o.job_id = meta.job_id;
                                o.job_kind = meta.job_kind;
                            }
                        }
                        p
                    })
                    .collect(),
            ))
        }
        (Some(procs), _) => Some(Cow::Borrowed(procs)),
    }
}

/// A sample of GPU "GPU-1" at `ts_ms` without any reading, for tests to fill in.
#[cfg(test)]
pub(crate) fn blank_sample(ts_ms: i64) -> Sample {
    Sample { ts_ms, uuid: "GPU-1".into(), ..Default::default() }
}

#[cfg(test)]
mod holder_tests {
    use super::*;

    fn alloc(ns: &str, pod: &str, dev: &str) -> PodAllocation {
        PodAllocation {
            namespace: ns.into(),
            pod: pod.into(),
            container: "main".into(),
            resource: "nvidia.com/gpu".into(),
            device_id: dev.into(),
            ..Default::default()
        }
    }

    fn pod_of(p: &GpuProcess) -> (Option<&str>, Option<&str>) {
        let o = p.owner.as_ref().unwrap();
        (o.namespace.as_deref(), o.pod_name.as_deref())
    }

    #[test]
    fn a_process_is_the_same_whatever_its_readings() {
        let p = GpuProcess {
            pid: 7,
            used_bytes: Some(1 << 30),
            sm_pct: Some(40.0),
            command: Some("python".into()),
            owner: Some(ProcessOwner { user: Some("ana".into()), ..Default::default() }),
            ..Default::default()
        };
        assert!(p.same_identity(&GpuProcess { used_bytes: Some(2 << 30), sm_pct: None, ..p.clone() }));
        assert!(!p.same_identity(&GpuProcess { pid: 8, ..p.clone() }));
        assert!(!p.same_identity(&GpuProcess { command: None, ..p.clone() }));
        assert!(!p.same_identity(&GpuProcess { user: Some("root".into()), ..p.clone() }));
        assert!(!p.same_identity(&GpuProcess { container_id: Some("c1".into()), ..p.clone() }));
        assert!(!p.same_identity(&GpuProcess { owner: None, ..p.clone() }));
    }

    #[test]
    fn no_allocation_keeps_the_list() {
        assert_eq!(holders(None, &[]), None);
        let procs = vec![GpuProcess { pid: 7, ..Default::default() }];
        assert_eq!(holders(Some(&procs), &[]).unwrap().as_ref(), procs.as_slice());
    }

    #[test]
    fn an_allocated_gpu_without_processes_is_held_by_its_pods() {
        let a = [
            alloc("ml", "nb-alice", "GPU-1::0"),
            alloc("ml", "nb-alice", "GPU-1::1"),
            alloc("cv", "train", "GPU-1::2"),
        ];
        for procs in [None, Some(&[][..])] {
            let h = holders(procs, &a).unwrap();
            assert_eq!(h.len(), 2, "one holder per pod, not per replica");
            assert_eq!(pod_of(&h[0]), (Some("cv"), Some("train")));
            assert_eq!(pod_of(&h[1]), (Some("ml"), Some("nb-alice")));
            assert!(h.iter().all(|p| p.pid == 0 && p.sm_pct.is_none()));
        }
        let s = Sample { processes: Some(vec![]), allocations: a.to_vec(), ..Default::default() };
        assert!(s.is_allocated() && s.holders_known());
        let s = Sample { processes: None, ..Default::default() };
        assert!(!s.is_allocated() && !s.holders_known());
    }

    #[test]
    fn one_pod_names_the_processes_that_name_none() {
        let seen = GpuProcess {
            pid: 1,
            owner: Some(ProcessOwner { namespace: Some("x".into()), pod_name: Some("y".into()), ..Default::default() }),
            ..Default::default()
        };
        let unseen = GpuProcess { pid: 2, owner: None, ..Default::default() };
        let user_only = GpuProcess {
            pid: 3,
            owner: Some(ProcessOwner { user: Some("alice".into()), ..Default::default() }),
            ..Default::default()
        };
        let procs = vec![seen.clone(), unseen, user_only];
        let h = holders(Some(&procs), &[alloc("ml", "nb", "GPU-1")]).unwrap();
        assert_eq!(h[0], seen);
        assert_eq!(pod_of(&h[1]), (Some("ml"), Some("nb")));
        assert_eq!(pod_of(&h[2]), (Some("ml"), Some("nb")));
        assert_eq!(h[2].owner.as_ref().unwrap().user.as_deref(), Some("alice"));
        // The pod's Kubernetes metadata reaches the processes of the pod that lack it.
        let mut meta = alloc("ml", "nb", "GPU-1");
        meta.team = Some("research".into());
        meta.pod_user = Some("alice".into());
        meta.job_kind = Some("RayJob".into());
        meta.job_name = Some("tune".into());
        let h = holders(Some(&procs), std::slice::from_ref(&meta)).unwrap();
        let o = h[1].owner.as_ref().unwrap();
        assert_eq!((o.team.as_deref(), o.pod_user.as_deref()), (Some("research"), Some("alice")));
        assert_eq!((o.job_id.as_deref(), o.job_kind.as_deref()), (Some("ml/tune"), Some("RayJob")));
        assert_eq!(h[0], seen, "another pod's process keeps its own");
        let alone = holders(Some(&[]), &[meta]).unwrap();
        assert_eq!(alone[0].owner.as_ref().unwrap().job_id.as_deref(), Some("ml/tune"));
        // Several pods: which one a process serves is not known.
        let two = [alloc("ml", "a", "GPU-1::0"), alloc("ml", "b", "GPU-1::1")];
        assert_eq!(holders(Some(&procs), &two).unwrap().as_ref(), procs.as_slice());
    }
}
