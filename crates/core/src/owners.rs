//! Owner accounting: whose GPU time it was. A GPU-minute's credit (its state, wasted seconds,
//! energy, funnel sums) is shared among the owners of the processes that the minute's raw
//! samples list, so that owner rows add up to the same money as the GPU rows.
//!
//! Fair sharing, per sample: every sample of the minute counts equally (at a steady interval
//! that is time; identical process lists of a minute come grouped, with their sample count). Inside one sample, the processes on the GPU share it by their SM % where every
//! one of them has an SM % in that minute (the mean of the readings the agent sent, NVML
//! process utilization) and the sum is above 0; otherwise evenly. Processes of the same owner
//! add up. A sample with no process gives its share to [`OwnerGroup::NoProcess`]; a process
//! whose owner field is not known, or a sample whose process list could not be read, to
//! [`OwnerGroup::Unknown`]: nothing is guessed.

use std::collections::{BTreeMap, HashMap};

use crate::sample::GpuProcess;

/// What owner rows are grouped by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OwnerKey {
    /// The pod's owner from its Kubernetes metadata where known, else the Unix user of the
    /// process, else the Slurm job user.
    User,
    /// Whoever is known to hold the GPU: the user as [`OwnerKey::User`], else the pod
    /// (`namespace/name`, as [`OwnerKey::Pod`]) — a GPU the kubelet allocated to a pod whose
    /// processes the agent cannot see has a pod but no user. The fleet summary's top owners.
    Holder,
    /// The Kubernetes namespace.
    Namespace,
    /// The team of the pod's namespace (its `fleetlens.io/team` label, read by the agent's
    /// `--kube-metadata`). Not the GPU's Fleetlens team (`group_by=team`).
    NamespaceTeam,
    /// The pod: `namespace/name` where both are known, the name alone, else the pod UID.
    Pod,
    /// The job: the Slurm job id, or a Kubernetes job's `namespace/name`.
    Job,
    /// The value of a `--label-from-env` variable.
    Label(String),
    /// The job run ([`crate::jobcard::run_key`]): Slurm job, pod, container or process. Not a
    /// report grouping (report cards use it).
    Run,
}

/// A row of an owner report.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OwnerGroup {
    Owner(String),
    /// A process whose owner (for this key) the host could not tell, or a sample without a
    /// readable process list.
    Unknown,
    /// Nobody was on the GPU.
    NoProcess,
}

impl OwnerGroup {
    /// The row's name: the owner, `(unknown)` or `(no process)`.
    pub fn name(&self) -> &str {
        match self {
            OwnerGroup::Owner(s) => s,
            OwnerGroup::Unknown => "(unknown)",
            OwnerGroup::NoProcess => "(no process)",
        }
    }
}

/// Longest label name accepted in `label:<name>`.
pub const MAX_LABEL_NAME: usize = 256;

impl OwnerKey {
    /// `user`, `namespace`, `pod`, `job`, `label:<name>`. `Ok(None)`: not an owner key (the
    /// caller may know other groupings); `Err`: an owner key spelled wrong (`label:` with no
    /// name).
    pub fn parse(s: &str) -> Result<Option<OwnerKey>, String> {
        Ok(Some(match s {
            "user" => OwnerKey::User,
            "holder" => OwnerKey::Holder,
            "namespace" => OwnerKey::Namespace,
            "namespace_team" => OwnerKey::NamespaceTeam,
            "pod" => OwnerKey::Pod,
            "job" => OwnerKey::Job,
            _ => match s.strip_prefix("label:") {
                Some(name) => {
                    let name = name.trim();
                    if name.is_empty() {
                        return Err("label: needs a variable name, e.g. label:EXPERIMENT_ID".into());
                    }
                    if name.len() > MAX_LABEL_NAME {
                        return Err(format!("a label name is at most {MAX_LABEL_NAME} bytes"));
                    }
                    OwnerKey::Label(name.to_string())
                }
                None => return Ok(None),
            },
        }))
    }

    pub fn as_string(&self) -> String {
        match self {
            OwnerKey::User => "user".into(),
            OwnerKey::Holder => "holder".into(),
            OwnerKey::Namespace => "namespace".into(),
            OwnerKey::NamespaceTeam => "namespace_team".into(),
            OwnerKey::Pod => "pod".into(),
            OwnerKey::Job => "job".into(),
            OwnerKey::Label(n) => format!("label:{n}"),
            OwnerKey::Run => "run".into(),
        }
    }

    /// The process's owner for this key, where known.
    pub fn value_of(&self, p: &GpuProcess) -> Option<String> {
        let o = p.owner.as_ref();
        let field = |f: fn(&crate::ProcessOwner) -> &Option<String>| o.and_then(|o| f(o).clone());
        let v = match self {
            // A pod's declared owner beats the container's Unix user (root, or a bare UID).
            OwnerKey::User => field(|o| &o.pod_user)
                .or_else(|| field(|o| &o.user))
                .or_else(|| p.user.clone())
                .or_else(|| field(|o| &o.job_user)),
            OwnerKey::Namespace => field(|o| &o.namespace),
            OwnerKey::NamespaceTeam => field(|o| &o.team),
            OwnerKey::Pod => match (field(|o| &o.namespace), field(|o| &o.pod_name)) {
                (Some(ns), Some(name)) => Some(format!("{ns}/{name}")),
                (None, Some(name)) => Some(name),
                _ => field(|o| &o.pod_uid),
            },
            OwnerKey::Holder => {
                return OwnerKey::User.value_of(p).or_else(|| OwnerKey::Pod.value_of(p));
            }
            OwnerKey::Job => field(|o| &o.job_id),
            OwnerKey::Label(name) => o.and_then(|o| o.labels.get(name).cloned()),
            OwnerKey::Run => crate::jobcard::run_key(p),
        };
        v.filter(|s| !s.is_empty())
    }
}

/// The owners' shares (summing to 1) of the samples of one GPU in one minute: each distinct
/// process list as stored (`None`: not read) with the number of samples that carried it.
/// Empty when there is no sample.
pub fn minute_shares(samples: &[(Option<&[GpuProcess]>, u32)], key: &OwnerKey) -> Vec<(OwnerGroup, f64)> {
    let count: u32 = samples.iter().map(|(_, n)| n).sum();
    if count == 0 {
        return Vec::new();
    }
    // Mean SM % per PID over the minute, from the samples that carry one.
    let mut sm: HashMap<u32, (f64, u32)> = HashMap::new();
    for (list, n) in samples {
        for p in list.iter().flat_map(|l| l.iter()) {
            if let Some(v) = p.sm_pct {
                let e = sm.entry(p.pid).or_default();
                e.0 += v * f64::from(*n);
                e.1 += n;
            }
        }
    }
    let sm_of = |pid: u32| sm.get(&pid).filter(|(_, n)| *n > 0).map(|(s, n)| s / f64::from(*n));
    let mut out: BTreeMap<OwnerGroup, f64> = BTreeMap::new();
    for (list, n) in samples {
        let per_sample = f64::from(*n) / f64::from(count);
        match list {
            None => *out.entry(OwnerGroup::Unknown).or_default() += per_sample,
            Some([]) => *out.entry(OwnerGroup::NoProcess).or_default() += per_sample,
            Some(procs) => {
                let weights: Option<Vec<f64>> = procs.iter().map(|p| sm_of(p.pid)).collect();
                let weights = match weights {
                    Some(w) if w.iter().sum::<f64>() > 0.0 => w,
                    _ => vec![1.0; procs.len()],
                };
                let total: f64 = weights.iter().sum();
                for (p, w) in procs.iter().zip(weights) {
                    let group = key.value_of(p).map_or(OwnerGroup::Unknown, OwnerGroup::Owner);
                    *out.entry(group).or_default() += per_sample * w / total;
                }
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProcessOwner;

    fn proc_(pid: u32, sm: Option<f64>, owner: ProcessOwner) -> GpuProcess {
        GpuProcess { pid, sm_pct: sm, owner: Some(owner), ..Default::default() }
    }

    fn user(u: &str) -> ProcessOwner {
        ProcessOwner { user: Some(u.into()), ..Default::default() }
    }

    fn share(v: &[(OwnerGroup, f64)], g: &OwnerGroup) -> f64 {
        v.iter().find(|(x, _)| x == g).map_or(0.0, |(_, s)| *s)
    }

    fn alice() -> OwnerGroup {
        OwnerGroup::Owner("alice".into())
    }

    fn bob() -> OwnerGroup {
        OwnerGroup::Owner("bob".into())
    }

    #[test]
    fn parses_keys() {
        assert_eq!(OwnerKey::parse("user"), Ok(Some(OwnerKey::User)));
        assert_eq!(OwnerKey::parse("job"), Ok(Some(OwnerKey::Job)));
        assert_eq!(OwnerKey::parse("holder"), Ok(Some(OwnerKey::Holder)));
        assert_eq!(OwnerKey::Holder.as_string(), "holder");
        assert_eq!(OwnerKey::parse("namespace_team"), Ok(Some(OwnerKey::NamespaceTeam)));
        assert_eq!(OwnerKey::NamespaceTeam.as_string(), "namespace_team");
        // A pod's declared owner beats the container's Unix user; the team is the namespace's.
        let p = proc_(
            1,
            None,
            ProcessOwner {
                user: Some("root".into()),
                pod_user: Some("alice".into()),
                team: Some("research".into()),
                ..Default::default()
            },
        );
        assert_eq!(OwnerKey::User.value_of(&p).as_deref(), Some("alice"));
        assert_eq!(OwnerKey::NamespaceTeam.value_of(&p).as_deref(), Some("research"));
        assert_eq!(OwnerKey::User.value_of(&proc_(2, None, user("root"))).as_deref(), Some("root"));
        assert_eq!(OwnerKey::parse("label:RUN_ID"), Ok(Some(OwnerKey::Label("RUN_ID".into()))));
        assert_eq!(OwnerKey::parse("team"), Ok(None));
        assert!(OwnerKey::parse("label:").is_err());
        assert!(OwnerKey::parse("label:  ").is_err());
        assert!(OwnerKey::parse(&format!("label:{}", "x".repeat(300))).is_err());
        assert_eq!(OwnerKey::Label("A".into()).as_string(), "label:A");
    }

    #[test]
    fn values_per_key() {
        let o = ProcessOwner {
            user: Some("alice".into()),
            pod_uid: Some("0b6f".into()),
            pod_name: Some("nb-alice".into()),
            namespace: Some("ml".into()),
            job_id: Some("48213".into()),
            job_user: Some("carol".into()),
            labels: [("RUN".to_string(), "r7".to_string())].into(),
            ..Default::default()
        };
        let p = proc_(1, None, o.clone());
        assert_eq!(OwnerKey::User.value_of(&p).as_deref(), Some("alice"));
        assert_eq!(OwnerKey::Namespace.value_of(&p).as_deref(), Some("ml"));
        assert_eq!(OwnerKey::Pod.value_of(&p).as_deref(), Some("ml/nb-alice"));
        assert_eq!(OwnerKey::Job.value_of(&p).as_deref(), Some("48213"));
        assert_eq!(OwnerKey::Label("RUN".into()).value_of(&p).as_deref(), Some("r7"));
        assert_eq!(OwnerKey::Label("OTHER".into()).value_of(&p), None);
        // Pod UID when the name is not known; Slurm user when the Unix user is not.
        let p = proc_(1, None, ProcessOwner { pod_uid: Some("0b6f".into()), job_user: Some("carol".into()), ..o });
        let p = GpuProcess { owner: p.owner.map(|o| ProcessOwner { user: None, pod_name: None, ..o }), ..p };
        assert_eq!(OwnerKey::Pod.value_of(&p).as_deref(), Some("0b6f"));
        assert_eq!(OwnerKey::User.value_of(&p).as_deref(), Some("carol"));
        // Older agents: the process's own user field.
        let old = GpuProcess { pid: 2, user: Some("dave".into()), ..Default::default() };
        assert_eq!(OwnerKey::User.value_of(&old).as_deref(), Some("dave"));
        assert_eq!(OwnerKey::Namespace.value_of(&old), None);
        // The holder: the user where known, else the pod.
        assert_eq!(OwnerKey::Holder.value_of(&old).as_deref(), Some("dave"));
        let pod_only = proc_(
            0,
            None,
            ProcessOwner { namespace: Some("ml".into()), pod_name: Some("nb".into()), ..Default::default() },
        );
        assert_eq!(OwnerKey::Holder.value_of(&pod_only).as_deref(), Some("ml/nb"));
        assert_eq!(OwnerKey::Holder.value_of(&GpuProcess::default()), None);
    }

    #[test]
    fn shares_by_sm_where_every_process_has_one() {
        let a = [proc_(1, Some(60.0), user("alice")), proc_(2, Some(20.0), user("bob"))];
        let s = minute_shares(&[(Some(&a[..]), 1), (Some(&a[..]), 1)], &OwnerKey::User);
        assert!((share(&s, &alice()) - 0.75).abs() < 1e-12);
        assert!((share(&s, &bob()) - 0.25).abs() < 1e-12);
        // SM % read in one sample of the minute (every 10 polls) applies to the whole minute.
        let read = [proc_(1, Some(90.0), user("alice")), proc_(2, Some(10.0), user("bob"))];
        let unread = [proc_(1, None, user("alice")), proc_(2, None, user("bob"))];
        let s = minute_shares(&[(Some(&read[..]), 1), (Some(&unread[..]), 2)], &OwnerKey::User);
        assert!((share(&s, &alice()) - 0.9).abs() < 1e-12);
    }

    #[test]
    fn shares_evenly_without_sm() {
        // One process without SM % → even split.
        let a = [proc_(1, Some(60.0), user("alice")), proc_(2, None, user("bob"))];
        let s = minute_shares(&[(Some(&a[..]), 1)], &OwnerKey::User);
        assert_eq!(share(&s, &alice()), 0.5);
        // Both at 0 SM % (idle-held together) → even split.
        let a = [proc_(1, Some(0.0), user("alice")), proc_(2, Some(0.0), user("bob"))];
        assert_eq!(share(&minute_shares(&[(Some(&a[..]), 1)], &OwnerKey::User), &bob()), 0.5);
        // Two processes of alice and one of bob: alice 2/3.
        let a = [proc_(1, None, user("alice")), proc_(3, None, user("alice")), proc_(2, None, user("bob"))];
        let s = minute_shares(&[(Some(&a[..]), 1)], &OwnerKey::User);
        assert!((share(&s, &alice()) - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn unknown_and_empty() {
        let a = [proc_(1, None, user("alice")), GpuProcess { pid: 9, ..Default::default() }];
        let s = minute_shares(&[(Some(&a[..]), 1), (Some(&[]), 2), (None, 1)], &OwnerKey::User);
        assert_eq!(share(&s, &alice()), 0.125);
        assert_eq!(share(&s, &OwnerGroup::Unknown), 0.125 + 0.25);
        assert_eq!(share(&s, &OwnerGroup::NoProcess), 0.5);
        assert!((s.iter().map(|(_, v)| v).sum::<f64>() - 1.0).abs() < 1e-12);
        // A key the owner lacks is unknown, not guessed from another key.
        let s = minute_shares(&[(Some(&a[..1]), 3)], &OwnerKey::Namespace);
        assert_eq!(s, vec![(OwnerGroup::Unknown, 1.0)]);
        assert!(minute_shares(&[], &OwnerKey::User).is_empty());
        assert!(minute_shares(&[(None, 0)], &OwnerKey::User).is_empty());
        assert_eq!(OwnerGroup::NoProcess.name(), "(no process)");
    }
}
