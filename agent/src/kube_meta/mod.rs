//! Pod and namespace metadata from the Kubernetes API (`--kube-metadata`): the team of a pod's
//! namespace (its `fleetlens.io/team` label), the pod's owner (`app.kubernetes.io/part-of`, or
//! a configured label or annotation) and the job it runs for (its owner-reference chain,
//! [`owners`]). They ride on the samples' allocations and process owners to the server, which
//! keeps them out of Prometheus labels.
//!
//! Read-only and watch-based, through `kube`'s watcher and reflector: a metadata-only watch of
//! this node's pods (`fieldSelector=spec.nodeName=<node>`) and of the namespaces, cached in
//! memory; the watcher re-lists on `410 Gone`. The two owner kinds looked through (batch Jobs,
//! RayClusters) are read by a metadata `GET` once each and cached while a pod of this node
//! refers to them. The sample path only reads the caches.

pub mod owners;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::time::Instant;

pub use owners::JobRef;

use crate::source::{Annotate, Annotated, GpuSource, HostSamples};

/// The namespace label that names a team, unless configured otherwise.
pub const DEFAULT_TEAM_LABEL: &str = "fleetlens.io/team";
/// The pod label that names the pod's owner, unless configured otherwise.
pub const DEFAULT_USER_LABEL: &str = "app.kubernetes.io/part-of";

/// How often the owner chains of this node's pods are resolved again.
const RESOLVE_EVERY: Duration = Duration::from_secs(2);
/// An owner whose metadata could not be read is asked again after this long.
const RETRY_FAILED_OWNER: Duration = Duration::from_secs(60);
/// One metadata `GET` at most this long.
const GET_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum KubeMetaError {
    #[error("--kube-metadata: {0}")]
    Config(String),
    #[error("cannot make a Kubernetes API client: {0}")]
    Client(String),
}

/// What to read and how to name it.
#[derive(Debug, Clone)]
pub struct MetaConfig {
    /// This node's name: only its pods are watched.
    pub node: String,
    /// Namespace label naming the team.
    pub team_label: String,
    /// Pod label naming the owner.
    pub user_label: String,
    /// Pod annotation naming the owner; wins over the label where both are set.
    pub user_annotation: Option<String>,
}

/// What the metadata says about one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodMeta {
    pub team: Option<String>,
    pub pod_user: Option<String>,
    pub job: Option<JobRef>,
}

/// Where `--kube-metadata` points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiEndpoint {
    /// The cluster the agent runs in (service account), or `$KUBECONFIG`'s.
    Inferred,
    /// A plain URL with no credentials (`kubectl proxy`, a test's recorded API server).
    Url(String),
}

/// A Kubernetes API client for `endpoint`.
pub async fn client(endpoint: &ApiEndpoint) -> Result<kube::Client, KubeMetaError> {
    let config = match endpoint {
        ApiEndpoint::Inferred => kube::Config::infer().await.map_err(|e| KubeMetaError::Config(e.to_string()))?,
        ApiEndpoint::Url(url) => {
            kube::Config::new(url.parse().map_err(|e| KubeMetaError::Config(format!("{url}: {e}")))?)
        }
    };
    kube::Client::try_from(config).map_err(|e| KubeMetaError::Client(e.to_string()))
}

/// An owner looked through, by resource plural, namespace and name.
type OwnerId = (String, String, String);

#[derive(Debug, Clone)]
enum OwnerRead {
    /// Its owner references (empty: none).
    Read(Vec<OwnerReference>),
    /// Could not be read; ask again after this.
    Failed(Instant),
}

/// The watched caches of one node's pods and of the namespaces, and the pods' resolved jobs.
#[derive(Clone)]
pub struct KubeMeta {
    client: kube::Client,
    config: Arc<MetaConfig>,
    pods: Store<PartialObjectMeta<Pod>>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    owners: Arc<Mutex<HashMap<OwnerId, OwnerRead>>>,
    /// Pod (namespace, name) → its job, from the last resolution.
    jobs: Arc<Mutex<HashMap<(String, String), JobRef>>>,
    /// True once both watches have listed and the jobs were resolved once.
    synced: tokio::sync::watch::Receiver<bool>,
}

impl KubeMeta {
    /// Starts the watches (needs a tokio runtime); they run, re-listing as needed, until the
    /// process ends.
    pub fn start(client: kube::Client, config: MetaConfig) -> KubeMeta {
        let (pods, pod_writer) = reflector::store();
        let pod_api: Api<PartialObjectMeta<Pod>> = Api::all(client.clone());
        let on_node = watcher::Config::default().fields(&format!("spec.nodeName={}", config.node));
        tokio::spawn(drive("pods", watcher(pod_api, on_node).default_backoff().reflect(pod_writer)));
        let (namespaces, ns_writer) = reflector::store();
        let ns_api: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
        tokio::spawn(drive(
            "namespaces",
            watcher(ns_api, watcher::Config::default()).default_backoff().reflect(ns_writer),
        ));
        let (set_synced, synced) = tokio::sync::watch::channel(false);
        let meta = KubeMeta {
            client,
            config: Arc::new(config),
            pods,
            namespaces,
            owners: Arc::default(),
            jobs: Arc::default(),
            synced,
        };
        // The one task that waits for the stores (one waiter each: the reflector's readiness
        // is awaited here only) and then resolves the jobs for good.
        let resolver = meta.clone();
        tokio::spawn(async move {
            let _ = resolver.pods.wait_until_ready().await;
            let _ = resolver.namespaces.wait_until_ready().await;
            loop {
                resolver.resolve_jobs().await;
                set_synced.send_replace(true);
                tokio::time::sleep(RESOLVE_EVERY).await;
            }
        });
        meta
    }

    /// Waits (at most `limit`) for the first list of pods and namespaces and the pods' jobs,
    /// so that the first samples already carry them. False when the API did not answer in time.
    pub async fn ready(&self, limit: Duration) -> bool {
        let mut synced = self.synced.clone();
        matches!(tokio::time::timeout(limit, synced.wait_for(|s| *s)).await, Ok(Ok(_)))
    }

    /// Resolves the job of every pod of this node; forgets the owners no pod refers to.
    pub async fn resolve_jobs(&self) {
        let pods = self.pods.state();
        let mut jobs = HashMap::new();
        let mut used: Vec<OwnerId> = Vec::new();
        for pod in &pods {
            let (Some(ns), Some(name)) = (pod.metadata.namespace.clone(), pod.metadata.name.clone()) else { continue };
            if let Some(job) = self.job_of(&ns, pod, &mut used).await {
                jobs.insert((ns, name), job);
            }
        }
        self.owners.lock().expect("owner cache lock").retain(|id, _| used.contains(id));
        *self.jobs.lock().expect("job cache lock") = jobs;
    }

    async fn job_of(&self, ns: &str, pod: &PartialObjectMeta<Pod>, used: &mut Vec<OwnerId>) -> Option<JobRef> {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let refs = pod.metadata.owner_references.as_deref().unwrap_or_default();
        let chain = match owners::controller(refs).map(owners::step) {
            Some(owners::Step::Job(j)) => Some(j),
            Some(owners::Step::LookThrough { resource, name, or }) => {
                let id: OwnerId = (resource.plural.clone(), ns.to_string(), name.clone());
                used.push(id.clone());
                match self.owner_refs(&id, &resource).await {
                    Some(refs) => owners::through(Some(&refs), or),
                    // Unreadable (RBAC, an API error): the pod's labels may still say.
                    None => owners::from_labels(&labels).or(or),
                }
            }
            Some(owners::Step::NotAJob) | None => None,
        };
        chain.or_else(|| owners::from_labels(&labels))
    }

    /// The owner references of an owner, from the cache or one metadata `GET`.
    async fn owner_refs(&self, id: &OwnerId, resource: &kube::core::ApiResource) -> Option<Vec<OwnerReference>> {
        let cached = self.owners.lock().expect("owner cache lock").get(id).cloned();
        match cached {
            Some(OwnerRead::Read(refs)) => return Some(refs),
            Some(OwnerRead::Failed(at)) if at.elapsed() < RETRY_FAILED_OWNER => return None,
            _ => {}
        }
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &id.1, resource);
        let read = match tokio::time::timeout(GET_TIMEOUT, api.get_metadata_opt(&id.2)).await {
            Ok(Ok(Some(meta))) => OwnerRead::Read(meta.metadata.owner_references.unwrap_or_default()),
            // Gone already: nothing above it to find.
            Ok(Ok(None)) => OwnerRead::Read(Vec::new()),
            Ok(Err(e)) => {
                tracing::warn!(kind = %resource.kind, namespace = %id.1, name = %id.2, error = %e,
                    "cannot read a pod owner's metadata (RBAC: get on this kind); the pod's labels name its job where they can");
                OwnerRead::Failed(Instant::now())
            }
            Err(_) => OwnerRead::Failed(Instant::now()),
        };
        self.owners.lock().expect("owner cache lock").insert(id.clone(), read.clone());
        match read {
            OwnerRead::Read(refs) => Some(refs),
            OwnerRead::Failed(_) => None,
        }
    }

    /// The metadata of pod `ns/name`, where this node's watch has it.
    pub fn pod_meta(&self, ns: &str, name: &str) -> Option<PodMeta> {
        let pod = self.pods.get(&ObjectRef::new(name).within(ns))?;
        let label = |m: &Option<BTreeMap<String, String>>, key: &str| {
            m.as_ref().and_then(|m| m.get(key)).map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
        };
        let pod_user = self
            .config
            .user_annotation
            .as_deref()
            .and_then(|a| label(&pod.metadata.annotations, a))
            .or_else(|| label(&pod.metadata.labels, &self.config.user_label));
        let team =
            self.namespaces.get(&ObjectRef::new(ns)).and_then(|n| label(&n.metadata.labels, &self.config.team_label));
        let job = self.jobs.lock().expect("job cache lock").get(&(ns.to_string(), name.to_string())).cloned();
        Some(PodMeta { team, pod_user, job })
    }

    /// The (namespace, name) of this node's pod with UID `uid`.
    pub fn pod_by_uid(&self, uid: &str) -> Option<(String, String)> {
        let pod = self.pods.find(|p| p.metadata.uid.as_deref() == Some(uid))?;
        Some((pod.metadata.namespace.clone()?, pod.metadata.name.clone()?))
    }

    /// Pods of this node in the cache.
    pub fn pod_count(&self) -> usize {
        self.pods.state().len()
    }
}

/// Runs one watch for good, logging its errors (a `410 Gone` is routine: the watcher re-lists).
async fn drive<S, T>(what: &'static str, stream: S)
where
    S: futures::Stream<Item = Result<T, watcher::Error>> + Send,
{
    let mut stream = std::pin::pin!(stream);
    let mut failing = false;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(_) => failing = false,
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                tracing::debug!(what, "watch expired (410 Gone): listing again");
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(what, error = %e, "Kubernetes API watch failing (RBAC: list and watch); retrying with backoff");
                }
                failing = true;
            }
        }
    }
}

/// A source whose samples' allocations and pod processes carry their pods' metadata.
pub type WithKubeMeta = Annotated<PodMetadata>;

/// The pods' metadata from the Kubernetes API, put on the samples.
pub struct PodMetadata {
    meta: KubeMeta,
    /// Whether the first reading has waited for the API's first answer.
    waited: bool,
}

/// How long the first samples wait for the first answer of the API.
const FIRST_SYNC_WAIT: Duration = Duration::from_secs(10);

impl WithKubeMeta {
    pub fn new(inner: Box<dyn GpuSource>, meta: KubeMeta) -> Self {
        Annotated { inner, annotator: PodMetadata { meta, waited: false } }
    }
}

/// Fills what `meta` knows into an owner's empty fields.
fn fill(o: &mut fleetlens_core::ProcessOwner, ns: &str, meta: PodMeta) {
    o.team = o.team.take().or(meta.team);
    o.pod_user = o.pod_user.take().or(meta.pod_user);
    if o.job_id.is_none()
        && let Some(j) = meta.job
    {
        o.job_id = Some(format!("{ns}/{}", j.name));
        o.job_kind = Some(j.kind);
    }
}

/// Puts the pods' metadata on the samples: every allocation, and every process whose owner
/// names its pod (by namespace and name, or by the pod UID of its cgroup: the API then names
/// the pod as well).
pub fn attach(meta: &KubeMeta, hosts: &mut [HostSamples]) {
    for s in hosts.iter_mut().flat_map(|h| h.samples.iter_mut()) {
        for a in &mut s.allocations {
            if let Some(m) = meta.pod_meta(&a.namespace, &a.pod) {
                a.team = m.team;
                a.pod_user = m.pod_user;
                a.job_kind = m.job.as_ref().map(|j| j.kind.clone());
                a.job_name = m.job.map(|j| j.name);
            }
        }
        for p in s.processes.iter_mut().flatten() {
            let Some(o) = p.owner.as_mut() else { continue };
            if (o.namespace.is_none() || o.pod_name.is_none())
                && let Some((ns, name)) = o.pod_uid.as_deref().and_then(|uid| meta.pod_by_uid(uid))
            {
                o.namespace = Some(ns);
                o.pod_name = Some(name);
            }
            let (Some(ns), Some(name)) = (o.namespace.clone(), o.pod_name.clone()) else { continue };
            if let Some(m) = meta.pod_meta(&ns, &name) {
                fill(o, &ns, m);
            }
        }
    }
}

#[async_trait]
impl Annotate for PodMetadata {
    async fn annotate(&mut self, hosts: &mut [HostSamples]) {
        if !self.waited {
            self.waited = true;
            if self.meta.ready(FIRST_SYNC_WAIT).await {
                tracing::info!(
                    pods = self.meta.pod_count(),
                    "reading pod and namespace metadata from the Kubernetes API"
                );
            } else {
                tracing::warn!("the Kubernetes API has not answered yet; samples carry pod metadata once it does");
            }
        }
        attach(&self.meta, hosts);
    }
}
