//! A stand-in kubelet: a real tonic gRPC server serving the PodResources v1 API (the agent's
//! code generated from the same proto) on a unix socket, answering `List` with the pods a test
//! gives it — what the agent's `--kubelet-socket` talks to on a Kubernetes node. The agent's
//! own tests (agent/tests/kubelet.rs) use it too.

use std::path::Path;
use std::sync::{Arc, Mutex};

use fleetlens_agent::kubelet::proto::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};
use fleetlens_agent::kubelet::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices, ContainerResources,
    GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest, ListPodResourcesResponse, PodResources,
};
use tonic::{Request, Response, Status};

#[derive(Clone, Default)]
struct Lister {
    pods: Arc<Mutex<Vec<PodResources>>>,
    /// `List` calls answered.
    lists: Arc<Mutex<usize>>,
}

#[tonic::async_trait]
impl PodResourcesLister for Lister {
    async fn list(&self, _: Request<ListPodResourcesRequest>) -> Result<Response<ListPodResourcesResponse>, Status> {
        *self.lists.lock().unwrap() += 1;
        Ok(Response::new(ListPodResourcesResponse { pod_resources: self.pods.lock().unwrap().clone() }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Err(Status::unimplemented("not served by the stand-in kubelet"))
    }

    async fn get(&self, req: Request<GetPodResourcesRequest>) -> Result<Response<GetPodResourcesResponse>, Status> {
        let r = req.into_inner();
        let pods = self.pods.lock().unwrap();
        let pod = pods.iter().find(|p| p.name == r.pod_name && p.namespace == r.pod_namespace).cloned();
        match pod {
            Some(p) => Ok(Response::new(GetPodResourcesResponse { pod_resources: Some(p) })),
            None => Err(Status::not_found("no such pod")),
        }
    }
}

/// The stand-in kubelet, serving until stopped or dropped.
pub struct StandInKubelet {
    pods: Arc<Mutex<Vec<PodResources>>>,
    lists: Arc<Mutex<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl StandInKubelet {
    /// Serves on a new unix socket at `socket` (needs a tokio runtime).
    pub fn serve(socket: &Path) -> StandInKubelet {
        let lister = Lister::default();
        let (pods, lists) = (lister.pods.clone(), lister.lists.clone());
        let listener = tokio::net::UnixListener::bind(socket).expect("bind the kubelet socket");
        let task = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming(PodResourcesListerServer::new(lister), incoming)
                .await;
        });
        StandInKubelet { pods, lists, task }
    }

    /// Gives `device_ids` of `resource` to container `container` of pod `namespace/pod_name`.
    pub fn allocate(&self, namespace: &str, pod_name: &str, container: &str, resource: &str, device_ids: &[&str]) {
        self.pods.lock().unwrap().push(pod(namespace, pod_name, container, resource, device_ids));
    }

    /// Replaces every allocation with `pods` (pods left, others came).
    pub fn set_pods(&self, pods: Vec<PodResources>) {
        *self.pods.lock().unwrap() = pods;
    }

    /// How many `List` calls it answered.
    pub fn lists(&self) -> usize {
        *self.lists.lock().unwrap()
    }

    /// Stops serving (the socket file stays behind, as when a kubelet dies).
    pub async fn stop(&mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

/// Pod `namespace/name` whose one container `container` holds `device_ids` of `resource`.
pub fn pod(namespace: &str, name: &str, container: &str, resource: &str, device_ids: &[&str]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: vec![ContainerResources {
            name: container.into(),
            devices: vec![ContainerDevices {
                resource_name: resource.into(),
                device_ids: device_ids.iter().map(|s| s.to_string()).collect(),
                topology: None,
            }],
        }],
    }
}

impl Drop for StandInKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}
