//! The query of `GET /api/v1/reports/billing` (its JSON body is [`crate::BillingReport`]).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct BillingQuery {
    /// Period start, RFC 3339 or Unix milliseconds (default: 30 days before `to`).
    pub from: Option<String>,
    /// Period end, RFC 3339 or Unix milliseconds (default: now).
    pub to: Option<String>,
    /// Rows per team, host, GPU (default) or GPU model; or per owner of the GPU processes: `user`,
    /// `holder`, `namespace`, `namespace_team` (the namespace's `fleetlens.io/team` label), `pod`,
    /// `job` (Slurm, or a Kubernetes job's `namespace/name`) or `label:<name>` (a `--label-from-env` variable), from
    /// the raw samples (the raw retention, 7 days by default; default period for these: all of it).
    #[cfg_attr(
        feature = "openapi",
        param(pattern = "^(team|host|gpu|model|user|holder|namespace|namespace_team|pod|job|label:.+)$")
    )]
    pub group_by: Option<String>,
    /// `json` (default) or `csv`.
    #[cfg_attr(feature = "openapi", param(pattern = "^(json|csv)$"))]
    pub format: Option<String>,
}
