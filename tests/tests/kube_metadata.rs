//! Issue 28, part 2 and 3: the agent's Kubernetes API watches (`fleetlens_agent::kube_meta`)
//! against the recorded API server (`fleetlens_tests::kube_api`, a real HTTP server answering
//! list, watch and get in the API's shapes): this node's pods only (field selector), metadata
//! only, the namespace's team, the pod's owner, the job from the owner-reference chain of each
//! job kind; a MODIFIED namespace, a DELETED pod, and a change hidden by a `410 Gone` that only
//! a new list shows. No storage is involved.

use std::path::Path;
use std::time::{Duration, Instant};

use fleetlens_agent::kube_meta::{self, ApiEndpoint, JobRef, KubeMeta, MetaConfig, PodMeta};
use fleetlens_agent::source::HostSamples;
use fleetlens_core::{GpuProcess, PodAllocation, ProcessOwner, Sample};
use fleetlens_tests::kube_api::RecordedApiServer;
use serde_json::json;

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/kube-api/cluster.json")
}

fn job(kind: &str, name: &str) -> Option<JobRef> {
    Some(JobRef { kind: kind.into(), name: name.into() })
}

async fn start(api: &RecordedApiServer, annotation: Option<&str>) -> KubeMeta {
    let client = kube_meta::client(&ApiEndpoint::Url(api.url.clone())).await.unwrap();
    let meta = KubeMeta::start(
        client,
        MetaConfig {
            node: "k8s-node-1".into(),
            team_label: kube_meta::DEFAULT_TEAM_LABEL.into(),
            user_label: kube_meta::DEFAULT_USER_LABEL.into(),
            user_annotation: annotation.map(str::to_string),
        },
    );
    assert!(meta.ready(Duration::from_secs(20)).await, "no first sync; requests: {:?}", api.requests());
    meta
}

/// Polls until `check` holds (the watches deliver asynchronously).
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn pods_of_this_node_get_team_owner_and_job() {
    let api = RecordedApiServer::start().await;
    api.apply_fixture(&fixture());
    let meta = start(&api, Some("example.com/owner")).await;

    let pod = |ns: &str, name: &str| meta.pod_meta(ns, name);
    assert_eq!(
        pod("ml", "llm-pretrain-workers-0-0-x8k2p"),
        Some(PodMeta {
            team: Some("research".into()),
            pod_user: Some("bob".into()),
            job: job("JobSet", "llm-pretrain")
        }),
        "Pod → Job → JobSet"
    );
    assert_eq!(pod("ml", "bert-master-0").unwrap().job, job("PyTorchJob", "bert"));
    assert_eq!(
        pod("cv", "tune-raycluster-k2x7p-head-5v9bq").unwrap().job,
        job("RayJob", "tune"),
        "Pod → RayCluster → RayJob"
    );
    assert_eq!(
        pod("ml", "eval-nightly-29380000-7gq2d").unwrap().job,
        job("Job", "eval-nightly-29380000"),
        "a CronJob's run"
    );
    assert_eq!(pod("cv", "sweep-3").unwrap().job, job("Workload", "sweep"), "a Kueue pod group");
    assert_eq!(pod("cv", "web-7d9f8-abcde"), Some(PodMeta::default()), "a Deployment's pod is no job; cv has no team");
    // The configured annotation names the owner.
    assert_eq!(pod("ml", "nb-alice").unwrap().pod_user.as_deref(), Some("alice"));
    assert_eq!(pod("ml", "nb-alice").unwrap().job, None);
    // Another node's pod is not watched.
    assert_eq!(pod("ml", "llm-pretrain-workers-0-1-q7w4z"), None);

    let requests = api.requests();
    let pod_lists: Vec<&String> = requests.iter().filter(|r| r.starts_with("LIST /api/v1/pods?")).collect();
    assert!(!pod_lists.is_empty(), "{requests:?}");
    assert!(
        pod_lists.iter().all(|r| r.contains("fieldSelector=spec.nodeName%3Dk8s-node-1") && r.ends_with("(metadata)")),
        "this node's pods, metadata only: {pod_lists:?}"
    );
    assert!(
        requests.iter().any(|r| r.starts_with("WATCH /api/v1/pods?") && r.contains("resourceVersion=")),
        "{requests:?}"
    );
    // The owners looked through are read once (metadata), the rest not at all.
    let gets: Vec<&String> = requests.iter().filter(|r| r.starts_with("GET ")).collect();
    assert!(gets.iter().all(|r| r.ends_with("(metadata)")), "{gets:?}");
    for path in [
        "/apis/batch/v1/namespaces/ml/jobs/llm-pretrain-workers-0",
        "/apis/ray.io/v1/namespaces/cv/rayclusters/tune-raycluster-k2x7p",
    ] {
        assert_eq!(gets.iter().filter(|r| r.starts_with(&format!("GET {path}?"))).count(), 1, "{path}: {gets:?}");
    }
    meta.resolve_jobs().await;
    let again = api.requests().iter().filter(|r| r.starts_with("GET ")).count();
    assert_eq!(again, gets.len(), "cached: no second GET");

    // MODIFIED: the namespace's team changes; the next lookups say so.
    let mut ml = api.object("namespaces", "", "ml").unwrap();
    ml["metadata"]["labels"]["fleetlens.io/team"] = json!("nlp");
    api.apply(ml);
    eventually("the MODIFIED namespace", || pod("ml", "bert-master-0").and_then(|m| m.team).as_deref() == Some("nlp"))
        .await;

    // DELETED: the pod is gone from the cache.
    api.delete("pods", "ml", "bert-master-0");
    eventually("the DELETED pod", || pod("ml", "bert-master-0").is_none()).await;

    // 410 Gone: a change no watch hears of, then the history is compacted; the watches
    // expire, the agent lists again and sees it.
    let lists_before = api.requests().iter().filter(|r| r.starts_with("LIST /api/v1/namespaces?")).count();
    let mut cv = api.object("namespaces", "", "cv").unwrap();
    cv["metadata"]["labels"]["fleetlens.io/team"] = json!("vision");
    api.apply_and_expire_watches(cv);
    eventually("the change behind the 410", || pod("cv", "sweep-3").and_then(|m| m.team).as_deref() == Some("vision"))
        .await;
    let lists_after = api.requests().iter().filter(|r| r.starts_with("LIST /api/v1/namespaces?")).count();
    assert!(lists_after > lists_before, "re-listed after 410: {:?}", api.requests());
    // A pod added after the relist still arrives through the new watch.
    let mut late = api.object("pods", "cv", "sweep-3").unwrap();
    late["metadata"]["name"] = json!("sweep-4");
    late["metadata"]["uid"] = json!("a3c2e1f0-1111-4a2b-9c3d-000000000009");
    api.apply(late);
    eventually("a pod added after the relist", || pod("cv", "sweep-4").is_some()).await;
}

#[tokio::test]
async fn samples_carry_their_pods_metadata() {
    let api = RecordedApiServer::start().await;
    api.apply_fixture(&fixture());
    let meta = start(&api, None).await;

    let alloc = |ns: &str, pod: &str| PodAllocation {
        namespace: ns.into(),
        pod: pod.into(),
        container: "trainer".into(),
        resource: "nvidia.com/gpu".into(),
        device_id: "GPU-1".into(),
        ..Default::default()
    };
    // A process seen only by its cgroup's pod UID: the API names its pod.
    let by_uid = GpuProcess {
        pid: 42,
        owner: Some(ProcessOwner {
            user: Some("root".into()),
            pod_uid: Some("a3c2e1f0-1111-4a2b-9c3d-000000000004".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut hosts = vec![HostSamples::new(
        "k8s-node-1",
        vec![
            Sample {
                uuid: "GPU-1".into(),
                processes: Some(vec![]),
                allocations: vec![alloc("ml", "llm-pretrain-workers-0-0-x8k2p"), alloc("ml", "unknown-pod")],
                ..Default::default()
            },
            Sample { uuid: "GPU-2".into(), processes: Some(vec![by_uid]), ..Default::default() },
        ],
    )];
    kube_meta::attach(&meta, &mut hosts);
    let a = &hosts[0].samples[0].allocations;
    assert_eq!(
        (a[0].team.as_deref(), a[0].pod_user.as_deref(), a[0].job_kind.as_deref(), a[0].job_name.as_deref()),
        (Some("research"), Some("bob"), Some("JobSet"), Some("llm-pretrain"))
    );
    assert_eq!(a[1], alloc("ml", "unknown-pod"), "a pod the watch does not have: nothing guessed");
    let o = hosts[0].samples[1].processes.as_ref().unwrap()[0].owner.clone().unwrap();
    assert_eq!((o.namespace.as_deref(), o.pod_name.as_deref()), (Some("ml"), Some("bert-master-0")));
    assert_eq!((o.job_id.as_deref(), o.job_kind.as_deref()), (Some("ml/bert"), Some("PyTorchJob")));
    assert_eq!((o.team.as_deref(), o.user.as_deref(), o.pod_user), (Some("research"), Some("root"), None));
}
