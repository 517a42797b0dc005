//! Which pod holds each GPU, from the kubelet's PodResources v1 API (`--kubelet-socket`): the
//! device manager's view, so a GPU allocated to a pod whose processes the agent cannot see
//! (another PID namespace, an inference server between requests) is still that pod's.
//!
//! The API is gRPC over the kubelet's unix socket; the client is generated from
//! `proto/podresources/v1/api.proto` (build.rs). v1 offers `List`, `GetAllocatableResources`
//! and `Get`, no `Watch`: the agent lists every `--kubelet-refresh` (a local call of a few
//! milliseconds) and attaches the allocations to every sample ([`WithKubelet`]).
//!
//! NVIDIA's device plugin names devices by GPU UUID (`GPU-…`), by MIG UUID (`MIG-…`; older
//! plugins `MIG-GPU-<uuid>/<gi>/<ci>`), by index (`DEVICE_ID_STRATEGY=index`), and gives shared
//! (time-sliced, MPS) replicas the ids `<id>::<n>`. [`parse_device_id`] maps all of them to the
//! GPU they are on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use fleetlens_core::{PodAllocation, Sample};
use tokio::time::Instant;

use crate::source::{Annotate, Annotated, GpuSource, HostSamples};

/// Code generated from the PodResources v1 proto (client and server).
#[allow(clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("v1");
}

use proto::pod_resources_lister_client::PodResourcesListerClient;

/// Where the kubelet serves the PodResources API.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// How long one `List` may take before the agent gives up on it for this round.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// The GPU a device id names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeviceRef {
    /// A GPU or MIG UUID (`GPU-…`, `MIG-…`), as NVML names the GPU.
    Uuid(String),
    /// The GPU's index on the host (`DEVICE_ID_STRATEGY=index`).
    Index(u32),
}

/// The GPU a device plugin's device id stands for; `None` for an id of another form.
pub fn parse_device_id(id: &str) -> Option<DeviceRef> {
    // Shared replicas (time-slicing, MPS): `<id>::<replica>`.
    let base = id.split_once("::").map_or(id, |(b, _)| b).trim();
    // Pre-R470 MIG ids name the parent GPU and the instance: `MIG-GPU-<uuid>/<gi>/<ci>`.
    if let Some(rest) = base.strip_prefix("MIG-GPU-") {
        let parent = rest.split('/').next().unwrap_or(rest);
        return (!parent.is_empty()).then(|| DeviceRef::Uuid(format!("GPU-{parent}")));
    }
    if (base.starts_with("GPU-") || base.starts_with("MIG-")) && base.len() > 4 {
        return Some(DeviceRef::Uuid(base.to_string()));
    }
    base.parse::<u32>().ok().map(DeviceRef::Index)
}

/// True for extended resources that are NVIDIA GPUs: `nvidia.com/gpu`, MIG profiles
/// (`nvidia.com/mig-1g.10gb`) and renamed shared GPUs (`nvidia.com/gpu.shared`).
pub fn is_gpu_resource(name: &str) -> bool {
    name == "nvidia.com/gpu" || name.starts_with("nvidia.com/gpu.") || name.starts_with("nvidia.com/mig-")
}

/// The node's GPU allocations from one `List`, by the GPU they name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AllocationTable {
    by_gpu: BTreeMap<DeviceRef, Vec<PodAllocation>>,
}

impl AllocationTable {
    pub fn from_list(resp: &proto::ListPodResourcesResponse) -> Self {
        let mut by_gpu: BTreeMap<DeviceRef, Vec<PodAllocation>> = BTreeMap::new();
        for pod in &resp.pod_resources {
            if pod.name.is_empty() || pod.namespace.is_empty() {
                continue;
            }
            for c in &pod.containers {
                for d in c.devices.iter().filter(|d| is_gpu_resource(&d.resource_name)) {
                    for id in &d.device_ids {
                        let Some(gpu) = parse_device_id(id) else { continue };
                        by_gpu.entry(gpu).or_default().push(PodAllocation {
                            namespace: pod.namespace.clone(),
                            pod: pod.name.clone(),
                            container: c.name.clone(),
                            resource: d.resource_name.clone(),
                            device_id: id.clone(),
                            // The pod's metadata comes from the Kubernetes API (`kube_meta`).
                            ..PodAllocation::default()
                        });
                    }
                }
            }
        }
        for list in by_gpu.values_mut() {
            list.sort();
            list.dedup();
        }
        Self { by_gpu }
    }

    pub fn is_empty(&self) -> bool {
        self.by_gpu.is_empty()
    }

    /// GPUs allocated to some pod.
    pub fn len(&self) -> usize {
        self.by_gpu.len()
    }

    /// The allocations of the GPU of `s`: by its UUID, and by its index where `by_index` (ids
    /// by index only make sense for the local host's samples).
    pub fn for_sample(&self, s: &Sample, by_index: bool) -> Vec<PodAllocation> {
        let mut out: Vec<PodAllocation> =
            self.by_gpu.get(&DeviceRef::Uuid(s.uuid.clone())).cloned().unwrap_or_default();
        if by_index && let Some(i) = s.gpu_index {
            out.extend(self.by_gpu.get(&DeviceRef::Index(i)).into_iter().flatten().cloned());
        }
        out.sort();
        out.dedup();
        out
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("cannot connect to the kubelet at {path}: {message}")]
    Connect { path: PathBuf, message: String },
    #[error("the kubelet's List failed: {0}")]
    Call(String),
    #[error("the kubelet did not answer within {0:?}")]
    Timeout(Duration),
}

/// Connects to the PodResources API on the unix socket `path`.
pub async fn connect(path: &Path) -> Result<PodResourcesListerClient<tonic::transport::Channel>, KubeletError> {
    let socket = path.to_path_buf();
    // The URI is required by the HTTP/2 layer; the connector ignores it and dials the socket.
    let channel = tonic::transport::Endpoint::from_static("http://kubelet.local")
        .connect_timeout(CALL_TIMEOUT)
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(socket).await?))
            }
        }))
        .await
        .map_err(|e| KubeletError::Connect { path: path.to_path_buf(), message: error_chain(&e) })?;
    Ok(PodResourcesListerClient::new(channel))
}

/// Asks the kubelet at `path` which pods hold which GPUs (a fresh connection each time: the
/// kubelet restarts, and recreates the socket, on upgrades).
pub async fn list_allocations(path: &Path) -> Result<AllocationTable, KubeletError> {
    let call = async {
        let mut client = connect(path).await?;
        let resp = client
            .list(proto::ListPodResourcesRequest {})
            .await
            .map_err(|s| KubeletError::Call(format!("{}: {}", s.code(), s.message())))?;
        Ok(AllocationTable::from_list(resp.get_ref()))
    };
    tokio::time::timeout(CALL_TIMEOUT * 2, call).await.map_err(|_| KubeletError::Timeout(CALL_TIMEOUT * 2))?
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// What the agent last heard from the kubelet, for logging each change once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Unknown,
    NoSocket,
    Up,
    Failing,
}

/// A source whose samples carry the pods the kubelet allocated their GPUs to.
pub type WithKubelet = Annotated<KubeletAllocations>;

/// The kubelet's GPU allocations, read again every refresh period, put on the samples.
pub struct KubeletAllocations {
    socket: PathBuf,
    refresh: Duration,
    table: AllocationTable,
    /// When `table` was last read successfully, and when a read was last tried.
    read_at: Option<Instant>,
    tried_at: Option<Instant>,
    link: Link,
}

impl WithKubelet {
    pub fn new(inner: Box<dyn GpuSource>, socket: PathBuf, refresh: Duration) -> Self {
        let annotator = KubeletAllocations {
            socket,
            refresh,
            table: AllocationTable::default(),
            read_at: None,
            tried_at: None,
            link: Link::Unknown,
        };
        Annotated { inner, annotator }
    }
}

impl KubeletAllocations {
    /// Reads the allocations again when a refresh is due. An absent socket turns the feature
    /// off until it appears (logged once); a failing kubelet keeps the last table for three
    /// refresh periods, then drops it rather than give GPUs to pods that may have left.
    async fn refresh_if_due(&mut self) {
        let now = Instant::now();
        if self.tried_at.is_some_and(|t| now.saturating_duration_since(t) < self.refresh) {
            return;
        }
        self.tried_at = Some(now);
        if !self.socket.exists() {
            if self.link != Link::NoSocket {
                tracing::info!(socket = %self.socket.display(),
                    "no kubelet pod-resources socket: GPU allocations to pods are not read (on Kubernetes, mount it read-only into the agent)");
            }
            self.link = Link::NoSocket;
            self.table = AllocationTable::default();
            return;
        }
        match list_allocations(&self.socket).await {
            Ok(table) => {
                if self.link != Link::Up {
                    tracing::info!(socket = %self.socket.display(), allocated_gpus = table.len(),
                        "reading GPU allocations from the kubelet");
                }
                self.link = Link::Up;
                self.table = table;
                self.read_at = Some(now);
            }
            Err(e) => {
                if self.link != Link::Failing {
                    tracing::warn!(error = %e, "cannot read GPU allocations from the kubelet; retrying every refresh");
                }
                self.link = Link::Failing;
                if self.read_at.is_none_or(|t| now.saturating_duration_since(t) > self.refresh * 3) {
                    self.table = AllocationTable::default();
                }
            }
        }
    }

    fn attach(&self, hosts: &mut [HostSamples]) {
        if self.table.is_empty() {
            return;
        }
        // Device ids by index name the local host's GPUs: only trusted when the reading is of
        // one host (a multi-host replay or simulation has several GPU 0s).
        let by_index = hosts.len() == 1;
        for h in hosts {
            for s in &mut h.samples {
                s.allocations = self.table.for_sample(s, by_index);
            }
        }
    }
}

#[async_trait]
impl Annotate for KubeletAllocations {
    async fn annotate(&mut self, hosts: &mut [HostSamples]) {
        self.refresh_if_due().await;
        self.attach(hosts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_map_to_gpus() {
        let u = |s: &str| Some(DeviceRef::Uuid(s.to_string()));
        assert_eq!(
            parse_device_id("GPU-b8c24ac0-1d2e-3f40-5a6b-7c8d9e0f1a2b"),
            u("GPU-b8c24ac0-1d2e-3f40-5a6b-7c8d9e0f1a2b")
        );
        assert_eq!(parse_device_id("GPU-b8c24ac0::3"), u("GPU-b8c24ac0"));
        assert_eq!(
            parse_device_id("MIG-0b6f3c1e-aaaa-bbbb-cccc-000000000001"),
            u("MIG-0b6f3c1e-aaaa-bbbb-cccc-000000000001")
        );
        assert_eq!(parse_device_id("MIG-GPU-b8c24ac0/7/0"), u("GPU-b8c24ac0"));
        assert_eq!(parse_device_id("MIG-GPU-b8c24ac0/7/0::1"), u("GPU-b8c24ac0"));
        assert_eq!(parse_device_id("3"), Some(DeviceRef::Index(3)));
        assert_eq!(parse_device_id("3::0"), Some(DeviceRef::Index(3)));
        for other in ["", "GPU-", "nvme0n1", "0000:3b:00.0", "-1"] {
            assert_eq!(parse_device_id(other), None, "{other:?}");
        }
    }

    #[test]
    fn gpu_resources() {
        for yes in ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/gpu.shared"] {
            assert!(is_gpu_resource(yes), "{yes}");
        }
        for no in ["nvidia.com/gpus", "amd.com/gpu", "cpu", "example.com/foo", "nvidia.com/gpudirect"] {
            assert!(!is_gpu_resource(no), "{no}");
        }
    }

    fn pod(ns: &str, name: &str, containers: Vec<proto::ContainerResources>) -> proto::PodResources {
        proto::PodResources { name: name.into(), namespace: ns.into(), containers }
    }

    fn container(name: &str, resource: &str, ids: &[&str]) -> proto::ContainerResources {
        proto::ContainerResources {
            name: name.into(),
            devices: vec![proto::ContainerDevices {
                resource_name: resource.into(),
                device_ids: ids.iter().map(|s| s.to_string()).collect(),
                topology: None,
            }],
        }
    }

    #[test]
    fn a_list_becomes_allocations_per_gpu() {
        let resp = proto::ListPodResourcesResponse {
            pod_resources: vec![
                pod("ml", "nb-alice", vec![container("notebook", "nvidia.com/gpu", &["GPU-a"])]),
                pod("ml", "serve", vec![container("s", "nvidia.com/gpu.shared", &["GPU-b::0", "GPU-b::1"])]),
                pod("cv", "train", vec![container("t", "nvidia.com/gpu.shared", &["GPU-b::2"])]),
                pod("cv", "mig", vec![container("m", "nvidia.com/mig-1g.10gb", &["MIG-c"])]),
                pod("cv", "nic", vec![container("n", "example.com/nic", &["GPU-a"])]),
                pod("ops", "by-index", vec![container("x", "nvidia.com/gpu", &["4"])]),
            ],
        };
        let t = AllocationTable::from_list(&resp);
        let sample =
            |uuid: &str, index: Option<u32>| Sample { uuid: uuid.into(), gpu_index: index, ..Sample::default() };
        let a = t.for_sample(&sample("GPU-a", Some(0)), true);
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].namespace.as_str(), a[0].pod.as_str(), a[0].container.as_str()),
            ("ml", "nb-alice", "notebook")
        );
        let b = t.for_sample(&sample("GPU-b", Some(1)), true);
        let pods: Vec<&str> = b.iter().map(|a| a.pod.as_str()).collect();
        assert_eq!(pods, ["train", "serve", "serve"], "every replica is listed, pods sorted by namespace");
        assert_eq!(t.for_sample(&sample("MIG-c", None), true)[0].resource, "nvidia.com/mig-1g.10gb");
        assert_eq!(t.for_sample(&sample("GPU-z", Some(4)), true)[0].pod, "by-index");
        assert!(t.for_sample(&sample("GPU-z", Some(4)), false).is_empty(), "indexes only for the local host");
        assert!(t.for_sample(&sample("GPU-z", Some(0)), true).is_empty());
    }
}
