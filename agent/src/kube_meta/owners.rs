//! The job a pod runs for, from its owner-reference chain: Pod → Job → JobSet, Pod → RayCluster
//! → RayJob, Pod → PyTorchJob (and the other Kubeflow training jobs), Pod → Job (plain, or a
//! CronJob's run). Kueue's plain pod groups have no owner: their `kueue.x-k8s.io/pod-group-name`
//! label names the workload.
//!
//! Only two kinds are looked through — batch `Job` (a JobSet's replicated jobs) and `RayCluster`
//! (a RayJob's cluster) — by reading their metadata; every other step is the pod's own
//! references and labels.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::{ApiResource, GroupVersionKind};

/// A Kubernetes job: its kind and its name in the pod's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobRef {
    pub kind: String,
    pub name: String,
}

impl JobRef {
    fn new(kind: &str, name: &str) -> JobRef {
        JobRef { kind: kind.to_string(), name: name.to_string() }
    }
}

/// What one owner reference means for the job search.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The owner is the job.
    Job(JobRef),
    /// The owner may itself belong to a job: read its metadata (this resource) and look at its
    /// controller. Where it belongs to none, `or` is the job (a plain batch Job), if any.
    LookThrough { resource: ApiResource, name: String, or: Option<JobRef> },
    /// Not a job (ReplicaSet, StatefulSet, a CronJob above a Job, …).
    NotAJob,
}

fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

/// Training-job kinds of the Kubeflow training operator and trainer.
const KUBEFLOW_JOBS: [&str; 7] = ["PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "TrainJob"];

/// Where the owner reference `r` leads.
pub fn step(r: &OwnerReference) -> Step {
    let group = group_of(&r.api_version);
    let version = r.api_version.rsplit('/').next().unwrap_or("v1");
    match (group, r.kind.as_str()) {
        ("batch", "Job") => Step::LookThrough {
            resource: ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", version, "Job"), "jobs"),
            name: r.name.clone(),
            or: Some(JobRef::new("Job", &r.name)),
        },
        ("ray.io", "RayCluster") => Step::LookThrough {
            resource: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("ray.io", version, "RayCluster"),
                "rayclusters",
            ),
            name: r.name.clone(),
            or: None,
        },
        ("jobset.x-k8s.io", "JobSet") | ("ray.io", "RayJob") => Step::Job(JobRef::new(&r.kind, &r.name)),
        ("kubeflow.org" | "trainer.kubeflow.org", kind) if KUBEFLOW_JOBS.contains(&kind) => {
            Step::Job(JobRef::new(kind, &r.name))
        }
        _ => Step::NotAJob,
    }
}

/// An object's controller reference (the one with `controller: true`, else the first).
pub fn controller(refs: &[OwnerReference]) -> Option<&OwnerReference> {
    refs.iter().find(|r| r.controller == Some(true)).or_else(|| refs.first())
}

/// The job of an owner that was looked through: its controller's job, else its own.
pub fn through(owner_refs: Option<&[OwnerReference]>, or: Option<JobRef>) -> Option<JobRef> {
    match owner_refs.and_then(controller).map(step) {
        Some(Step::Job(j)) => Some(j),
        _ => or,
    }
}

/// The job named by the pod's labels, for when the owner chain cannot be read (no RBAC for it,
/// an API error) or names no job: JobSet and KubeRay label their pods, and Kueue names a plain
/// pod group by label.
pub fn from_labels(labels: &BTreeMap<String, String>) -> Option<JobRef> {
    if let Some(name) = labels.get("jobset.sigs.k8s.io/jobset-name") {
        return Some(JobRef::new("JobSet", name));
    }
    if labels.get("ray.io/originated-from-crd").map(String::as_str) == Some("RayJob")
        && let Some(name) = labels.get("ray.io/originated-from-cr-name")
    {
        return Some(JobRef::new("RayJob", name));
    }
    labels.get("kueue.x-k8s.io/pod-group-name").map(|g| JobRef::new("Workload", g))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(api_version: &str, kind: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    #[test]
    fn each_kind_leads_where_it_should() {
        assert_eq!(
            step(&owner("kubeflow.org/v1", "PyTorchJob", "bert", true)),
            Step::Job(JobRef::new("PyTorchJob", "bert"))
        );
        assert_eq!(
            step(&owner("jobset.x-k8s.io/v1alpha2", "JobSet", "llm", true)),
            Step::Job(JobRef::new("JobSet", "llm"))
        );
        assert_eq!(step(&owner("ray.io/v1", "RayJob", "tune", true)), Step::Job(JobRef::new("RayJob", "tune")));
        match step(&owner("batch/v1", "Job", "llm-worker-0", true)) {
            Step::LookThrough { resource, name, or } => {
                assert_eq!((resource.plural.as_str(), resource.group.as_str()), ("jobs", "batch"));
                assert_eq!(name, "llm-worker-0");
                assert_eq!(or, Some(JobRef::new("Job", "llm-worker-0")));
            }
            other => panic!("{other:?}"),
        }
        match step(&owner("ray.io/v1", "RayCluster", "tune-raycluster-x", true)) {
            Step::LookThrough { resource, or, .. } => {
                assert_eq!(resource.plural, "rayclusters");
                assert_eq!(or, None, "a RayCluster of its own is a service, not a job");
            }
            other => panic!("{other:?}"),
        }
        for (v, k) in [("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet"), ("batch/v1", "CronJob"), ("v1", "Node")] {
            assert_eq!(step(&owner(v, k, "x", true)), Step::NotAJob, "{k}");
        }
    }

    #[test]
    fn a_looked_through_owner_gives_its_controllers_job() {
        let js = [owner("v1", "Other", "o", false), owner("jobset.x-k8s.io/v1alpha2", "JobSet", "llm", true)];
        assert_eq!(through(Some(&js), Some(JobRef::new("Job", "w"))), Some(JobRef::new("JobSet", "llm")));
        let cron = [owner("batch/v1", "CronJob", "nightly", true)];
        assert_eq!(through(Some(&cron), Some(JobRef::new("Job", "nightly-1"))), Some(JobRef::new("Job", "nightly-1")));
        assert_eq!(through(None, None), None);
    }

    #[test]
    fn labels_name_jobs_when_the_chain_cannot_be_read() {
        let l = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(from_labels(&l(&[("jobset.sigs.k8s.io/jobset-name", "llm")])), Some(JobRef::new("JobSet", "llm")));
        assert_eq!(
            from_labels(&l(&[("ray.io/originated-from-crd", "RayJob"), ("ray.io/originated-from-cr-name", "tune")])),
            Some(JobRef::new("RayJob", "tune"))
        );
        assert_eq!(from_labels(&l(&[("ray.io/originated-from-crd", "RayService")])), None);
        assert_eq!(
            from_labels(&l(&[("kueue.x-k8s.io/pod-group-name", "sweep-7")])),
            Some(JobRef::new("Workload", "sweep-7"))
        );
        assert_eq!(from_labels(&l(&[("app", "x")])), None);
    }
}
