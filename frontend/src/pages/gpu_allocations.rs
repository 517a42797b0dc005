//! The GPU detail's "Kubernetes pods": the pods the kubelet allocated the GPU to in the latest
//! sample (the agent's `--kubelet-socket`), with the team, owner and job the Kubernetes API
//! gives them (`--kube-metadata`). Shown only where the latest sample has allocations.

use fleetlens_api::GpuSummary;
use leptos::prelude::*;

use crate::components::card::Card;
use crate::components::table::{Column, DataTable};
use crate::ctx::Latest;

const DASH: &str = "—";

#[component]
pub fn Allocations(gpu: Latest<GpuSummary>) -> impl IntoView {
    move || {
        let allocations =
            gpu.with(|g| g.as_ref().and_then(|g| g.latest.as_ref()).map(|s| s.allocations.clone()).unwrap_or_default());
        if allocations.is_empty() {
            return None;
        }
        Some(view! {
            <Card title_id="alloc-title" title="Kubernetes pods">
                <DataTable
                    class="alloc-table"
                    caption="Pods the kubelet allocated this GPU to in the latest sample"
                    columns={[
                        Column::text("Pod"),
                        Column::text("Container"),
                        Column::text("Resource"),
                        Column::text("Team"),
                        Column::text("Owner"),
                        Column::text("Job"),
                    ]}
                >
                    {allocations.into_iter().map(|a| {
                        let job = match (&a.job_kind, &a.job_name) {
                            (Some(kind), Some(name)) => Some(format!("{kind} {}/{name}", a.namespace)),
                            _ => None,
                        };
                        let (no_team, no_user, no_job) = (a.team.is_none(), a.pod_user.is_none(), job.is_none());
                        view! {
                            <tr>
                                <td data-col="pod">{format!("{}/{}", a.namespace, a.pod)}</td>
                                <td data-col="container">{a.container}</td>
                                <td data-col="resource" class="mono" title=a.device_id>{a.resource}</td>
                                <td data-col="team" class:na=no_team>{a.team.unwrap_or_else(|| DASH.into())}</td>
                                <td data-col="owner" class:na=no_user>{a.pod_user.unwrap_or_else(|| DASH.into())}</td>
                                <td data-col="job" class:na=no_job>{job.unwrap_or_else(|| DASH.into())}</td>
                            </tr>
                        }
                    }).collect_view()}
                </DataTable>
            </Card>
        })
    }
}
