//! Data-centre GPU models: how NVML names map to them, their memory, and their dense peak
//! FLOP/s per precision from NVIDIA's datasheets (no sparsity: the tensor figures NVIDIA
//! prints "with sparsity" are halved). MFU is measured against these peaks.

use serde::{Deserialize, Serialize};

crate::named_enum! {
    /// Arithmetic precision of a job's FLOPs.
    pub enum Precision("precision") {
        /// FP64 (tensor-core FP64 where the GPU has it, as DGEMM uses it).
        Fp64 = "fp64",
        /// FP32 on the CUDA cores (no TF32).
        Fp32 = "fp32",
        /// TF32 tensor cores.
        Tf32 = "tf32",
        /// BF16 tensor cores.
        Bf16 = "bf16",
        /// FP16 tensor cores: the BF16 figure (they are equal on every GPU here; V100 and T4
        /// have FP16 tensor cores only). A variant of its own so that a job reported as `fp16`
        /// reads back as `fp16`.
        Fp16 = "fp16",
        /// FP8 tensor cores (Hopper, Ada, Blackwell).
        Fp8 = "fp8",
        /// FP4 tensor cores (Blackwell).
        Fp4 = "fp4",
    }
}

impl Precision {
    /// Deserializes a precision's name in any case, blanks around it ignored (`" BF16"` is
    /// `bf16`), for bodies written by hand; another name is serde's unknown-variant error,
    /// which lists the names. Use with `#[serde(deserialize_with = …)]`.
    pub fn deserialize_any_case<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Precision, D::Error> {
        let name = String::deserialize(deserializer)?;
        Precision::parse(&name.trim().to_ascii_lowercase())
            .ok_or_else(|| serde::de::Error::unknown_variant(&name, &Precision::NAMES))
    }
}

/// A GPU model the datasheet table knows. The serde name is the stable id used in price
/// tables and the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum GpuModel {
    #[serde(rename = "b200")]
    B200,
    #[serde(rename = "h200")]
    H200,
    #[serde(rename = "h200-nvl")]
    H200Nvl,
    #[serde(rename = "gh200")]
    Gh200,
    #[serde(rename = "h100-sxm")]
    H100Sxm,
    #[serde(rename = "h100-pcie")]
    H100Pcie,
    #[serde(rename = "h100-nvl")]
    H100Nvl,
    #[serde(rename = "a100-80gb")]
    A100_80,
    #[serde(rename = "a100-40gb")]
    A100_40,
    #[serde(rename = "l40s")]
    L40S,
    #[serde(rename = "l40")]
    L40,
    #[serde(rename = "l4")]
    L4,
    #[serde(rename = "a40")]
    A40,
    #[serde(rename = "a30")]
    A30,
    #[serde(rename = "a10")]
    A10,
    #[serde(rename = "a10g")]
    A10G,
    #[serde(rename = "v100-32gb")]
    V100_32,
    #[serde(rename = "v100-16gb")]
    V100_16,
    #[serde(rename = "t4")]
    T4,
}

/// Datasheet figures of one model. Dense TFLOP/s; `None` where NVIDIA lists no figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GpuSpec {
    pub model: GpuModel,
    pub id: &'static str,
    pub display_name: &'static str,
    /// Nominal memory as on the datasheet ("80 GB"); NVML reports a little less as usable.
    pub memory_gb: f64,
    pub fp64_tflops: Option<f64>,
    pub fp32_tflops: Option<f64>,
    pub tf32_tflops: Option<f64>,
    pub bf16_tflops: Option<f64>,
    pub fp8_tflops: Option<f64>,
    pub fp4_tflops: Option<f64>,
}

const fn spec(
    model: GpuModel,
    id: &'static str,
    display_name: &'static str,
    memory_gb: f64,
    [fp64, fp32, tf32, bf16, fp8, fp4]: [Option<f64>; 6],
) -> GpuSpec {
    GpuSpec {
        model,
        id,
        display_name,
        memory_gb,
        fp64_tflops: fp64,
        fp32_tflops: fp32,
        tf32_tflops: tf32,
        bf16_tflops: bf16,
        fp8_tflops: fp8,
        fp4_tflops: fp4,
    }
}

const N: Option<f64> = None;
const fn t(v: f64) -> Option<f64> {
    Some(v)
}

/// Dense peaks: [fp64, fp32, tf32, bf16/fp16, fp8, fp4] TFLOP/s. Sources: NVIDIA datasheets
/// (HGX B200; H200 SXM / NVL; GH200; H100 SXM / PCIe / NVL; A100; L40S; L40; L4; A40; A30;
/// A10; V100 SXM2; T4). Sparse tensor figures halved. The A10G is an AWS-only part with no
/// NVIDIA datasheet: only its memory and FP32 (same GA102 configuration as the A10) are given.
#[rustfmt::skip]
pub const SPECS: [GpuSpec; 19] = [
    spec(GpuModel::B200, "b200", "NVIDIA B200", 180.0, [t(37.0), t(75.0), t(1100.0), t(2250.0), t(4500.0), t(9000.0)]),
    spec(GpuModel::H200, "h200", "NVIDIA H200 SXM", 141.0, [t(67.0), t(67.0), t(494.5), t(989.5), t(1979.0), N]),
    spec(GpuModel::H200Nvl, "h200-nvl", "NVIDIA H200 NVL", 141.0, [t(60.0), t(60.0), t(417.5), t(835.5), t(1670.5), N]),
    spec(GpuModel::Gh200, "gh200", "NVIDIA GH200 (96 GB)", 96.0, [t(67.0), t(67.0), t(494.5), t(989.5), t(1979.0), N]),
    spec(GpuModel::H100Sxm, "h100-sxm", "NVIDIA H100 SXM", 80.0, [t(67.0), t(67.0), t(494.5), t(989.5), t(1979.0), N]),
    spec(GpuModel::H100Pcie, "h100-pcie", "NVIDIA H100 PCIe", 80.0, [t(51.0), t(51.0), t(378.0), t(756.5), t(1513.0), N]),
    spec(GpuModel::H100Nvl, "h100-nvl", "NVIDIA H100 NVL", 94.0, [t(60.0), t(60.0), t(417.5), t(835.5), t(1670.5), N]),
    spec(GpuModel::A100_80, "a100-80gb", "NVIDIA A100 80GB", 80.0, [t(19.5), t(19.5), t(156.0), t(312.0), N, N]),
    spec(GpuModel::A100_40, "a100-40gb", "NVIDIA A100 40GB", 40.0, [t(19.5), t(19.5), t(156.0), t(312.0), N, N]),
    spec(GpuModel::L40S, "l40s", "NVIDIA L40S", 48.0, [N, t(91.6), t(183.0), t(362.05), t(733.0), N]),
    spec(GpuModel::L40, "l40", "NVIDIA L40", 48.0, [N, t(90.5), t(90.5), t(181.0), t(362.0), N]),
    spec(GpuModel::L4, "l4", "NVIDIA L4", 24.0, [N, t(30.3), t(60.0), t(121.0), t(242.5), N]),
    spec(GpuModel::A40, "a40", "NVIDIA A40", 48.0, [N, t(37.4), t(74.8), t(149.7), N, N]),
    spec(GpuModel::A30, "a30", "NVIDIA A30", 24.0, [t(10.3), t(10.3), t(82.0), t(165.0), N, N]),
    spec(GpuModel::A10, "a10", "NVIDIA A10", 24.0, [N, t(31.2), t(62.5), t(125.0), N, N]),
    spec(GpuModel::A10G, "a10g", "NVIDIA A10G", 24.0, [N, t(31.2), N, N, N, N]),
    spec(GpuModel::V100_32, "v100-32gb", "NVIDIA V100 32GB", 32.0, [t(7.8), t(15.7), N, t(125.0), N, N]),
    spec(GpuModel::V100_16, "v100-16gb", "NVIDIA V100 16GB", 16.0, [t(7.8), t(15.7), N, t(125.0), N, N]),
    spec(GpuModel::T4, "t4", "NVIDIA T4", 16.0, [N, t(8.1), N, t(65.0), N, N]),
];

impl GpuSpec {
    /// Dense peak for a precision, FLOP/s (not TFLOP/s).
    pub fn peak_flops(&self, p: Precision) -> Option<f64> {
        let tflops = match p {
            Precision::Fp64 => self.fp64_tflops,
            Precision::Fp32 => self.fp32_tflops,
            Precision::Tf32 => self.tf32_tflops,
            Precision::Bf16 | Precision::Fp16 => self.bf16_tflops,
            Precision::Fp8 => self.fp8_tflops,
            Precision::Fp4 => self.fp4_tflops,
        };
        tflops.map(|t| t * 1e12)
    }

    /// Nominal memory in bytes, reading the datasheet's "GB" as GiB (it is the
    /// framebuffer size NVIDIA rounds: an "80 GB" H100 reports 79.6 GiB to NVML).
    pub fn memory_bytes(&self) -> i64 {
        (self.memory_gb * (1u64 << 30) as f64) as i64
    }
}

impl GpuModel {
    pub fn spec(self) -> &'static GpuSpec {
        SPECS.iter().find(|s| s.model == self).expect("every model has a spec")
    }

    /// Stable id, e.g. `h100-sxm`.
    pub fn id(self) -> &'static str {
        self.spec().id
    }

    pub fn from_id(id: &str) -> Option<GpuModel> {
        let id = id.trim();
        SPECS.iter().find(|s| s.id.eq_ignore_ascii_case(id)).map(|s| s.model)
    }

    /// Map a name as NVML reports it (`NVIDIA H100 80GB HBM3`, `NVIDIA A100-SXM4-80GB`,
    /// `Tesla T4`, …) or a model id to a model. MIG instances (`… MIG 1g.10gb`) are not a
    /// whole GPU, so they map to nothing rather than to their parent's figures.
    pub fn from_nvml_name(name: &str) -> Option<GpuModel> {
        use GpuModel::*;
        if let Some(m) = GpuModel::from_id(name) {
            return Some(m);
        }
        let upper = name.to_ascii_uppercase().replace(['-', '_', '/', ','], " ");
        let tokens: Vec<&str> = upper.split_whitespace().collect();
        let has = |t: &str| tokens.contains(&t);
        if has("MIG") {
            return None;
        }
        let model = if has("GH200") {
            Gh200
        } else if has("B200") {
            B200
        } else if has("H200") {
            if has("NVL") { H200Nvl } else { H200 }
        } else if has("H100") {
            if has("PCIE") {
                H100Pcie
            } else if has("NVL") {
                H100Nvl
            } else {
                // "NVIDIA H100 80GB HBM3" is the SXM5 part; PCIe and NVL say so.
                H100Sxm
            }
        } else if has("A100") {
            if has("80GB") {
                A100_80
            } else if has("40GB") {
                A100_40
            } else {
                return None;
            }
        } else if has("L40S") {
            L40S
        } else if has("L40") {
            L40
        } else if has("L4") {
            L4
        } else if has("A40") {
            A40
        } else if has("A30") {
            A30
        } else if has("A10G") {
            A10G
        } else if has("A10") {
            A10
        } else if has("V100S") || (has("V100") && has("32GB")) {
            V100_32
        } else if has("V100") {
            V100_16
        } else if has("T4") {
            T4
        } else {
            return None;
        };
        Some(model)
    }
}

/// Model FLOPs utilization: achieved FLOP/s ÷ the model's dense peak for the precision.
/// `None` when the datasheet has no figure for that model and precision.
pub fn mfu(achieved_flops_per_s: f64, model: GpuModel, precision: Precision) -> Option<f64> {
    model.spec().peak_flops(precision).map(|peak| achieved_flops_per_s / peak)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_names_map_to_models() {
        let cases = [
            ("NVIDIA H100 80GB HBM3", Some(GpuModel::H100Sxm)),
            ("NVIDIA H100 PCIe", Some(GpuModel::H100Pcie)),
            ("NVIDIA H100 NVL", Some(GpuModel::H100Nvl)),
            ("NVIDIA H200", Some(GpuModel::H200)),
            ("NVIDIA H200 NVL", Some(GpuModel::H200Nvl)),
            ("NVIDIA GH200 480GB", Some(GpuModel::Gh200)),
            ("NVIDIA B200", Some(GpuModel::B200)),
            ("NVIDIA A100-SXM4-80GB", Some(GpuModel::A100_80)),
            ("NVIDIA A100-SXM4-40GB", Some(GpuModel::A100_40)),
            ("NVIDIA A100 80GB PCIe", Some(GpuModel::A100_80)),
            ("NVIDIA A100-PCIE-40GB", Some(GpuModel::A100_40)),
            ("NVIDIA L40S", Some(GpuModel::L40S)),
            ("NVIDIA L40", Some(GpuModel::L40)),
            ("NVIDIA L4", Some(GpuModel::L4)),
            ("NVIDIA A10G", Some(GpuModel::A10G)),
            ("NVIDIA A10", Some(GpuModel::A10)),
            ("Tesla V100-SXM2-16GB", Some(GpuModel::V100_16)),
            ("Tesla V100-PCIE-32GB", Some(GpuModel::V100_32)),
            ("Tesla V100S-PCIE-32GB", Some(GpuModel::V100_32)),
            ("Tesla T4", Some(GpuModel::T4)),
            ("h100-sxm", Some(GpuModel::H100Sxm)),
            ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", None),
            ("NVIDIA GeForce RTX 4090", None),
            ("NVIDIA A100", None),
            ("", None),
        ];
        for (name, want) in cases {
            assert_eq!(GpuModel::from_nvml_name(name), want, "{name}");
        }
    }

    #[test]
    fn ids_round_trip_and_are_serde_names() {
        for s in SPECS {
            assert_eq!(GpuModel::from_id(s.id), Some(s.model));
            assert_eq!(s.model.id(), s.id);
            assert_eq!(serde_json::to_string(&s.model).unwrap(), format!("\"{}\"", s.id));
        }
    }

    #[test]
    fn dense_peaks_are_half_the_sparse_figures() {
        // H100 SXM datasheet: BF16 1,979 TFLOPS and FP8 3,958 TFLOPS "with sparsity".
        let h100 = GpuModel::H100Sxm.spec();
        assert_eq!(h100.peak_flops(Precision::Bf16), Some(989.5e12));
        assert_eq!(h100.peak_flops(Precision::Fp8), Some(1979.0e12));
        assert_eq!(GpuModel::A100_80.spec().peak_flops(Precision::Fp8), None);
        assert_eq!(GpuModel::H200.spec().memory_gb, 141.0);
        // Tensor peaks are above the CUDA-core FP32 peak wherever both exist.
        for s in SPECS {
            if let (Some(bf16), Some(fp32)) = (s.bf16_tflops, s.fp32_tflops) {
                assert!(bf16 > fp32, "{}", s.id);
            }
        }
    }

    #[test]
    fn mfu_is_achieved_over_dense_peak() {
        let m = mfu(400e12, GpuModel::H100Sxm, Precision::Bf16).unwrap();
        assert!((m - 400.0 / 989.5).abs() < 1e-12);
        let a100 = mfu(156e12, GpuModel::A100_40, Precision::Bf16).unwrap();
        assert!((a100 - 0.5).abs() < 1e-12);
        assert_eq!(mfu(1e12, GpuModel::T4, Precision::Fp8), None);
    }

    /// `fp16` is its own name (a job reported as fp16 reads back as fp16) with the BF16 figure.
    #[test]
    fn fp16_keeps_its_name_and_has_the_bf16_peak() {
        assert_eq!(serde_json::from_str::<Precision>("\"fp16\"").unwrap(), Precision::Fp16);
        assert_eq!(serde_json::to_string(&Precision::Fp16).unwrap(), "\"fp16\"");
        for spec in &SPECS {
            assert_eq!(spec.peak_flops(Precision::Fp16), spec.peak_flops(Precision::Bf16), "{}", spec.id);
        }
        assert_eq!(mfu(400e12, GpuModel::H100Sxm, Precision::Fp16), mfu(400e12, GpuModel::H100Sxm, Precision::Bf16));
    }

    #[test]
    fn precision_names_are_the_stored_ones_and_any_case_reads_them() {
        assert_eq!(Precision::NAMES, ["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]);
        let any_case = |text: &str| Precision::deserialize_any_case(&mut serde_json::Deserializer::from_str(text));
        assert_eq!(any_case("\" BF16 \"").unwrap(), Precision::Bf16);
        assert_eq!(any_case("\"Fp8\"").unwrap(), Precision::Fp8);
        let e = any_case("\"fp9\"").unwrap_err().to_string();
        assert!(e.contains("unknown variant `fp9`") && e.contains("`bf16`, `fp16`"), "{e}");
        // The exact form (a stored name, an answer read back) takes the names only.
        assert!(serde_json::from_str::<Precision>("\"BF16\"").is_err());
    }
}
