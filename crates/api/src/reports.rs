//! The query of `GET /api/v1/reports/billing` and its grouping (its JSON body is
//! [`crate::BillingReport`]).

use fleetlens_core::OwnerKey;
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

/// A GPU attribute a billing report can group by: each GPU stands in exactly one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuGrouping {
    /// The GPU's Fleetlens team (`unassigned` where it has none).
    Team,
    Host,
    /// The GPU itself (its UUID).
    Gpu,
    /// The GPU model (`unknown model` where the agent could not read it).
    Model,
}

/// What the rows of a billing report are (`group_by`): a GPU attribute, read from the hourly
/// rollups, or the owner of the GPU's processes, read from the raw samples (docs/OWNERS.md).
/// On the wire it is the `group_by` text: `team`, `host`, `gpu`, `model`, `user`, `holder`,
/// `namespace`, `namespace_team`, `pod`, `job` or `label:<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ReportGrouping {
    Gpu(GpuGrouping),
    Owner(OwnerKey),
}

impl Default for ReportGrouping {
    fn default() -> Self {
        ReportGrouping::Gpu(GpuGrouping::Gpu)
    }
}

impl ReportGrouping {
    /// The `group_by` text, or why it is not one (a message for people).
    pub fn parse(s: &str) -> Result<ReportGrouping, String> {
        Ok(match s {
            "team" => ReportGrouping::Gpu(GpuGrouping::Team),
            "host" => ReportGrouping::Gpu(GpuGrouping::Host),
            "gpu" => ReportGrouping::Gpu(GpuGrouping::Gpu),
            "model" => ReportGrouping::Gpu(GpuGrouping::Model),
            _ => match OwnerKey::parse(s)? {
                // Job runs are report cards, not report rows.
                Some(key) if key != OwnerKey::Run => ReportGrouping::Owner(key),
                _ => {
                    return Err(format!(
                        "{s:?}: use team, host, gpu, model, user, holder, namespace, namespace_team, pod, job or label:<name>"
                    ));
                }
            },
        })
    }

    /// The `group_by` text this grouping is parsed from.
    pub fn as_string(&self) -> String {
        match self {
            ReportGrouping::Gpu(GpuGrouping::Team) => "team".into(),
            ReportGrouping::Gpu(GpuGrouping::Host) => "host".into(),
            ReportGrouping::Gpu(GpuGrouping::Gpu) => "gpu".into(),
            ReportGrouping::Gpu(GpuGrouping::Model) => "model".into(),
            ReportGrouping::Owner(key) => key.as_string(),
        }
    }

    /// The name of the rows' column, for people: `Team`, `GPU`, `Namespace team`, `Label`, ….
    pub fn label(&self) -> &'static str {
        match self {
            ReportGrouping::Gpu(GpuGrouping::Team) => "Team",
            ReportGrouping::Gpu(GpuGrouping::Host) => "Host",
            ReportGrouping::Gpu(GpuGrouping::Gpu) => "GPU",
            ReportGrouping::Gpu(GpuGrouping::Model) => "Model",
            ReportGrouping::Owner(OwnerKey::User) => "User",
            ReportGrouping::Owner(OwnerKey::Holder) => "Holder",
            ReportGrouping::Owner(OwnerKey::Namespace) => "Namespace",
            ReportGrouping::Owner(OwnerKey::NamespaceTeam) => "Namespace team",
            ReportGrouping::Owner(OwnerKey::Pod) => "Pod",
            ReportGrouping::Owner(OwnerKey::Job) => "Job",
            ReportGrouping::Owner(OwnerKey::Label(_)) => "Label",
            ReportGrouping::Owner(OwnerKey::Run) => "Run",
        }
    }

    /// Whether the rows' GPU counts add up to the fleet's: a GPU is in one team, host and model,
    /// but several users, pods or jobs may share it in the period.
    pub fn counts_each_gpu_once(&self) -> bool {
        matches!(self, ReportGrouping::Gpu(_))
    }
}

impl std::fmt::Display for ReportGrouping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_string())
    }
}

impl Serialize for ReportGrouping {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.as_string())
    }
}

impl<'de> Deserialize<'de> for ReportGrouping {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ReportGrouping::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::{GpuGrouping, OwnerKey, ReportGrouping};

    #[test]
    fn every_grouping_reads_back_from_its_text() {
        for text in
            ["team", "host", "gpu", "model", "user", "holder", "namespace", "namespace_team", "pod", "job", "label:EXP"]
        {
            let grouping = ReportGrouping::parse(text).unwrap();
            assert_eq!(grouping.as_string(), text);
            let json = serde_json::to_string(&grouping).unwrap();
            assert_eq!(serde_json::from_str::<ReportGrouping>(&json).unwrap(), grouping);
        }
    }

    #[test]
    fn only_gpu_attributes_count_each_gpu_once() {
        assert!(ReportGrouping::Gpu(GpuGrouping::Model).counts_each_gpu_once());
        assert!(!ReportGrouping::Owner(OwnerKey::Pod).counts_each_gpu_once());
        assert!(!ReportGrouping::parse("label:team").unwrap().counts_each_gpu_once());
    }

    #[test]
    fn wrong_groupings_say_what_is_accepted() {
        for bad in ["run", "", "GPU", "owner"] {
            let message = ReportGrouping::parse(bad).unwrap_err();
            assert!(message.contains("label:<name>"), "{bad}: {message}");
        }
        assert!(ReportGrouping::parse("label:").unwrap_err().contains("needs a variable name"));
        assert!(serde_json::from_str::<ReportGrouping>("\"pods\"").is_err());
    }
}
