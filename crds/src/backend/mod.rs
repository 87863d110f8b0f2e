//! The catalog of inference backends.
//!
//! A backend is the inference server that runs inside a model's pod
//! (ollama, vLLM, llama.cpp, ...). The catalog records, per backend, what
//! the operator needs to build the pod (image, port, command, default args
//! and env, probes) and what the operator and scheduler need to place it
//! (supported GPU vendors and architectures). It is static data: image
//! overrides from the environment are resolved through a lookup function the
//! caller passes in, so nothing here reads the process environment.

use std::fmt;
use std::time::Duration;

use crate::gpu::Vendor;
use crate::v1alpha2::QuantizationFormat;

mod catalog;

use catalog::CATALOG;

/// llama.cpp `--n-gpu-layers` value that offloads every layer to the GPU.
pub const GPU_LAYERS_ALL: i32 = 999;

/// Port of a backend that is not in the catalog.
pub const FALLBACK_PORT: i32 = 8000;

/// Placeholder in [`Backend::args`] and [`Backend::env`] values replaced by
/// the path or name of the model the backend serves.
pub const MODEL_PLACEHOLDER: &str = "{model}";

/// Placeholder in [`Backend::args`] and [`Backend::env`] values replaced by
/// the backend's listening port.
pub const PORT_PLACEHOLDER: &str = "{port}";

/// One inference backend.
#[derive(Debug, PartialEq)]
pub struct Backend {
    /// Canonical, lower-case name (`llamacpp`, `mlc-llm`, ...).
    pub name: &'static str,
    /// Other accepted spellings, resolved by [`get`].
    pub aliases: &'static [&'static str],
    /// Port the server listens on inside the pod.
    pub port: i32,
    /// Container command; empty keeps the image's entrypoint.
    pub command: &'static [&'static str],
    /// Default container args; may contain [`MODEL_PLACEHOLDER`] and
    /// [`PORT_PLACEHOLDER`]. The operator appends config-driven args.
    pub args: &'static [&'static str],
    /// Default container env; values may contain the same placeholders.
    pub env: &'static [(&'static str, &'static str)],
    /// Image selection rules, tried in order (see [`Backend::image`]).
    pub images: &'static [ImageRule],
    /// Readiness probe.
    pub readiness: Probe,
    /// Startup probe, for servers whose load time exceeds what the
    /// readiness probe's failure budget covers.
    pub startup: Option<Probe>,
    /// Liveness probe. No backend has one: model loads take minutes and a
    /// liveness probe would restart pods mid-load.
    pub liveness: Option<Probe>,
    /// Hardware the backend runs on.
    pub vendors: &'static [Vendor],
    /// Support level per GPU architecture prefix (see [`arch_support`]).
    pub architectures: &'static [ArchSupport],
    /// How long the server typically needs to become ready.
    pub startup_timeout: Duration,
    /// Idle timeout used when `spec.serverless.idleTimeout` is unset.
    pub idle_timeout: Duration,
    /// Whether the pod needs the model volume (ollama pulls by itself).
    pub needs_volume: bool,
    /// Whether the backend generates images rather than text.
    pub image_generation: bool,
    /// Whether the backend can hot-load LoRA adapters.
    pub supports_lora: bool,
    /// Quantization formats the backend can serve.
    pub quantization_formats: &'static [QuantizationFormat],
}

/// One image choice: used when the vendor and architecture match and the
/// environment override or the default is non-empty.
#[derive(Debug, PartialEq)]
pub struct ImageRule {
    /// Vendor the rule applies to; `None` matches every vendor.
    pub vendor: Option<Vendor>,
    /// Architecture prefix the rule applies to (`gfx110`, `sm_5`); empty
    /// matches every architecture.
    pub arch_prefix: &'static str,
    /// Environment variable that overrides the image.
    pub env: &'static str,
    /// Image used when the environment variable is unset; empty makes the
    /// rule fall through to the next one.
    pub default: &'static str,
}

/// What a probe checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeAction {
    /// HTTP GET of this path on the backend port; 2xx/3xx passes.
    Http(&'static str),
    /// TCP connect to the backend port.
    Tcp,
}

/// A container probe against the backend port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// What the probe checks.
    pub action: ProbeAction,
    /// Seconds before the first probe.
    pub initial_delay_seconds: i32,
    /// Seconds between probes.
    pub period_seconds: i32,
    /// Seconds before one probe times out.
    pub timeout_seconds: i32,
    /// Consecutive failures before the probe fails.
    pub failure_threshold: i32,
}

impl Probe {
    /// HTTP probe with the catalog's usual failure budget (30 periods).
    pub(crate) const fn http(
        path: &'static str,
        initial_delay: i32,
        period: i32,
        timeout: i32,
    ) -> Probe {
        Probe {
            action: ProbeAction::Http(path),
            initial_delay_seconds: initial_delay,
            period_seconds: period,
            timeout_seconds: timeout,
            failure_threshold: 30,
        }
    }

    /// TCP probe with the catalog's usual failure budget (90 periods).
    pub(crate) const fn tcp(initial_delay: i32, period: i32, timeout: i32) -> Probe {
        Probe {
            action: ProbeAction::Tcp,
            initial_delay_seconds: initial_delay,
            period_seconds: period,
            timeout_seconds: timeout,
            failure_threshold: 90,
        }
    }

    /// The HTTP path the probe requests, `None` for TCP probes.
    pub fn path(&self) -> Option<&'static str> {
        match self.action {
            ProbeAction::Http(path) => Some(path),
            ProbeAction::Tcp => None,
        }
    }
}

/// How well a backend runs on a GPU architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SupportLevel {
    /// Production-ready.
    Full,
    /// Works, with known stability issues; the operator emits a warning
    /// event.
    Experimental,
    /// Cannot run; the operator fails the model and the scheduler rejects
    /// the node.
    Unsupported,
}

impl fmt::Display for SupportLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SupportLevel::Full => "full",
            SupportLevel::Experimental => "experimental",
            SupportLevel::Unsupported => "unsupported",
        })
    }
}

/// Support of a backend on the architectures sharing a prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchSupport {
    /// Architecture prefix: `gfx110` covers gfx1100/1101/1102, `sm_5` covers
    /// every Maxwell GPU.
    pub prefix: &'static str,
    /// How well the backend runs there.
    pub level: SupportLevel,
    /// Typical VRAM of one GPU of that class in MB (0 when unknown); the
    /// operator's VRAM-fit check uses it.
    pub max_vram_mb: i64,
}

/// Values substituted into a backend's default args and env.
#[derive(Clone, Copy, Debug)]
pub struct ArgContext<'a> {
    /// Path (or name, for ollama) of the model to serve.
    pub model: &'a str,
    /// Port to listen on.
    pub port: i32,
}

/// Error of [`get`]: the name is not a backend or an alias of one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown backend: {name} (known backends: {})", names().join(", "))]
pub struct UnknownBackend {
    /// The name as given.
    pub name: String,
}

impl Backend {
    /// The image for a node's vendor and architecture.
    ///
    /// Rules are tried in order; the first whose vendor and architecture
    /// prefix match and whose environment override (looked up through `env`)
    /// or default is non-empty wins. Returns `None` only when no rule yields
    /// an image, which does not happen for catalog backends when `env`
    /// returns nothing.
    pub fn image(
        &self,
        vendor: Vendor,
        arch: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Option<String> {
        self.images
            .iter()
            .filter(|rule| {
                rule.vendor.is_none_or(|v| v == vendor) && arch.starts_with(rule.arch_prefix)
            })
            .find_map(|rule| {
                env(rule.env)
                    .map(|value| value.trim().to_owned())
                    .filter(|value| !value.is_empty())
                    .or_else(|| (!rule.default.is_empty()).then(|| rule.default.to_owned()))
            })
    }

    /// The image for a vendor and architecture without environment
    /// overrides.
    pub fn default_image(&self, vendor: Vendor, arch: &str) -> Option<String> {
        self.image(vendor, arch, |_| None)
    }

    /// Whether the backend runs on this vendor's hardware.
    pub fn supports_vendor(&self, vendor: Vendor) -> bool {
        self.vendors.contains(&vendor)
    }

    /// The support entry of the longest architecture prefix matching
    /// `arch`, `None` when the catalog says nothing about it.
    pub fn arch_support(&self, arch: &str) -> Option<&'static ArchSupport> {
        self.architectures
            .iter()
            .filter(|support| arch.starts_with(support.prefix))
            .max_by_key(|support| support.prefix.len())
    }

    /// Whether the backend may run on `arch`: everything except an explicit
    /// [`SupportLevel::Unsupported`] entry passes, so new architectures are
    /// not rejected before the catalog knows them.
    pub fn supports_arch(&self, arch: &str) -> bool {
        self.arch_support(arch)
            .is_none_or(|support| support.level != SupportLevel::Unsupported)
    }

    /// The default args with placeholders substituted.
    pub fn render_args(&self, ctx: ArgContext<'_>) -> Vec<String> {
        self.args.iter().map(|arg| substitute(arg, ctx)).collect()
    }

    /// The default env with placeholders substituted.
    pub fn render_env(&self, ctx: ArgContext<'_>) -> Vec<(String, String)> {
        self.env
            .iter()
            .map(|(name, value)| ((*name).to_owned(), substitute(value, ctx)))
            .collect()
    }
}

fn substitute(template: &str, ctx: ArgContext<'_>) -> String {
    template
        .replace(MODEL_PLACEHOLDER, ctx.model)
        .replace(PORT_PLACEHOLDER, &ctx.port.to_string())
}

/// Looks a backend up by canonical name or alias, case-insensitively.
pub fn get(name: &str) -> Result<&'static Backend, UnknownBackend> {
    let wanted = name.trim().to_ascii_lowercase();
    CATALOG
        .iter()
        .find(|backend| backend.name == wanted || backend.aliases.contains(&wanted.as_str()))
        .ok_or_else(|| UnknownBackend {
            name: name.to_owned(),
        })
}

/// The canonical name of a backend name or alias (`llama.cpp` → `llamacpp`).
pub fn canonical_name(name: &str) -> Option<&'static str> {
    get(name).ok().map(|backend| backend.name)
}

/// Every backend in the catalog.
pub fn all() -> &'static [Backend] {
    CATALOG
}

/// Canonical names of every backend, in catalog order.
pub fn names() -> Vec<&'static str> {
    CATALOG.iter().map(|backend| backend.name).collect()
}

/// The support entry of `backend` on `arch`; `None` for unknown backends and
/// architectures the catalog says nothing about.
pub fn arch_support(backend: &str, arch: &str) -> Option<&'static ArchSupport> {
    get(backend).ok()?.arch_support(arch)
}

/// Whether `backend` may run on GPU architecture `arch` (the scheduler
/// extender's arch filter). Unknown backends never do; unknown
/// architectures always do.
pub fn supports_arch(backend: &str, arch: &str) -> bool {
    get(backend).is_ok_and(|backend| backend.supports_arch(arch))
}

/// Whether `backend` generates images (unknown backends do not).
pub fn is_image_generation(backend: &str) -> bool {
    get(backend).is_ok_and(|backend| backend.image_generation)
}

/// The listening port of `backend`, [`FALLBACK_PORT`] for unknown names.
pub fn port(backend: &str) -> i32 {
    get(backend).map_or(FALLBACK_PORT, |backend| backend.port)
}

/// Environment for ROCm containers on an AMD GPU of architecture `arch`
/// (`gfx1100`, `gfx906`, ...; empty means the gfx1100 class).
pub fn rocm_env(arch: &str) -> Vec<(&'static str, String)> {
    let arch = if arch.is_empty() { "gfx1100" } else { arch };
    let gfx_version = if arch.starts_with("gfx906") {
        "9.0.6"
    } else if arch.starts_with("gfx90a") {
        "9.0.10"
    } else if arch.starts_with("gfx942") {
        "9.4.2"
    } else if arch.starts_with("gfx103") {
        "10.3.0"
    } else {
        "11.0.0"
    };
    let mut env = vec![
        ("HSA_OVERRIDE_GFX_VERSION", gfx_version.to_owned()),
        ("HIP_VISIBLE_DEVICES", "0".to_owned()),
        ("ROCR_VISIBLE_DEVICES", "0".to_owned()),
        ("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "1".to_owned()),
        ("PYTORCH_ROCM_ARCH", arch.to_owned()),
    ];
    if arch.starts_with("gfx906") {
        env.push(("HSA_ENABLE_SDMA", "0".to_owned()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::{IDLE_TIMEOUT, IMAGE_IDLE_TIMEOUT};

    #[test]
    fn catalog_has_the_seven_backends_with_their_ports() {
        let ports: Vec<(&str, i32)> = all().iter().map(|b| (b.name, b.port)).collect();
        assert_eq!(
            ports,
            [
                ("ollama", 11434),
                ("vllm", 8000),
                ("mlc-llm", 8000),
                ("llamacpp", 8080),
                ("diffusers", 8000),
                ("comfyui", 8188),
                ("vllm-omni", 8000),
            ]
        );
    }

    #[test]
    fn lookup_accepts_aliases_and_case() {
        assert_eq!(get("llama.cpp").unwrap().name, "llamacpp");
        assert_eq!(get(" LLAMA-CPP ").unwrap().name, "llamacpp");
        assert_eq!(get("mlc").unwrap().name, "mlc-llm");
        assert_eq!(get("comfy_ui").unwrap().name, "comfyui");
        assert_eq!(get("vllm_omni").unwrap().name, "vllm-omni");
        assert_eq!(get("VLLM").unwrap().name, "vllm");
        assert_eq!(canonical_name("llama_cpp"), Some("llamacpp"));
        assert_eq!(canonical_name("tgi"), None);
    }

    #[test]
    fn unknown_backend_error_lists_known_names() {
        let err = get("tgi").unwrap_err();
        assert_eq!(err.name, "tgi");
        assert_eq!(
            err.to_string(),
            "unknown backend: tgi (known backends: ollama, vllm, mlc-llm, llamacpp, diffusers, comfyui, vllm-omni)"
        );
    }

    #[test]
    fn aliases_are_unique_and_never_shadow_a_name() {
        let mut seen = std::collections::BTreeSet::new();
        for backend in all() {
            assert!(seen.insert(backend.name), "{}", backend.name);
            for alias in backend.aliases {
                assert!(seen.insert(*alias), "{alias}");
            }
        }
    }

    #[test]
    fn every_backend_has_a_default_image_for_its_vendors() {
        for backend in all() {
            for vendor in backend.vendors {
                for arch in ["", "gfx1100", "gfx906", "sm_89", "sm_52"] {
                    assert!(
                        backend.default_image(*vendor, arch).is_some(),
                        "{} {vendor} {arch}",
                        backend.name
                    );
                }
            }
        }
    }

    #[test]
    fn image_rules_prefer_arch_then_vendor_then_generic() {
        let vllm = get("vllm").unwrap();
        assert_eq!(
            vllm.default_image(Vendor::Amd, "gfx1100").as_deref(),
            Some("registry.harbor.lan/flexinfer/vllm:rocm-gfx1100-fa")
        );
        assert_eq!(
            vllm.default_image(Vendor::Amd, "gfx942").as_deref(),
            Some("rocm/vllm:latest")
        );
        assert_eq!(
            vllm.default_image(Vendor::Nvidia, "sm_89").as_deref(),
            Some("vllm/vllm-openai:latest")
        );

        let llamacpp = get("llamacpp").unwrap();
        assert_eq!(
            llamacpp.default_image(Vendor::Cpu, "").as_deref(),
            Some("ghcr.io/ggerganov/llama.cpp:server")
        );
        // An empty default falls through to the next matching rule.
        assert_eq!(
            llamacpp.default_image(Vendor::Amd, "gfx1100").as_deref(),
            Some("ghcr.io/ggerganov/llama.cpp:server-rocm")
        );
    }

    #[test]
    fn environment_overrides_win_over_defaults() {
        let llamacpp = get("llamacpp").unwrap();
        let env = |name: &str| {
            (name == "DEFAULT_LLAMA_CPP_IMAGE_GFX1100").then(|| "my/llama:gfx1100".to_owned())
        };
        assert_eq!(
            llamacpp.image(Vendor::Amd, "gfx1101", env).as_deref(),
            Some("my/llama:gfx1100")
        );
        assert_eq!(
            llamacpp.image(Vendor::Amd, "gfx906", env).as_deref(),
            Some("ghcr.io/ggerganov/llama.cpp:server-rocm")
        );
        // Blank overrides are ignored.
        let blank = |_: &str| Some("  ".to_owned());
        assert_eq!(
            llamacpp.image(Vendor::Nvidia, "sm_89", blank).as_deref(),
            Some("ghcr.io/ggerganov/llama.cpp:server-cuda")
        );
    }

    #[test]
    fn arch_support_uses_longest_prefix() {
        assert_eq!(
            arch_support("vllm", "gfx1100").map(|s| s.level),
            Some(SupportLevel::Full)
        );
        assert_eq!(
            arch_support("vllm", "sm_52").map(|s| s.level),
            Some(SupportLevel::Unsupported)
        );
        assert_eq!(
            arch_support("comfyui", "gfx906").map(|s| s.level),
            Some(SupportLevel::Experimental)
        );
        assert_eq!(
            arch_support("llamacpp", "sm_52").map(|s| s.max_vram_mb),
            Some(6144)
        );
        assert_eq!(arch_support("vllm", "sm_89"), None);
        assert_eq!(arch_support("tgi", "gfx1100"), None);
    }

    #[test]
    fn supports_arch_rejects_only_explicitly_unsupported() {
        assert!(supports_arch("vllm", "gfx1100"));
        assert!(supports_arch("vllm", "sm_89"));
        assert!(!supports_arch("vllm", "sm_52"));
        assert!(!supports_arch("diffusers", "sm_50"));
        assert!(supports_arch("llama.cpp", "sm_52"));
        assert!(supports_arch("comfyui", "gfx906"));
        assert!(!supports_arch("tgi", "gfx1100"));
    }

    #[test]
    fn vendor_support() {
        assert!(get("llamacpp").unwrap().supports_vendor(Vendor::Cpu));
        assert!(!get("vllm").unwrap().supports_vendor(Vendor::Cpu));
        for backend in all() {
            assert!(backend.supports_vendor(Vendor::Nvidia), "{}", backend.name);
            assert!(backend.supports_vendor(Vendor::Amd), "{}", backend.name);
        }
    }

    #[test]
    fn probes_and_timeouts() {
        let vllm = get("vllm").unwrap();
        assert_eq!(vllm.readiness.path(), Some("/health"));
        assert_eq!(vllm.readiness.failure_threshold, 30);
        assert_eq!(get("ollama").unwrap().readiness.path(), Some("/"));
        assert_eq!(get("mlc-llm").unwrap().readiness.path(), Some("/v1/models"));
        let comfy = get("comfyui").unwrap();
        assert_eq!(comfy.readiness.action, ProbeAction::Tcp);
        assert_eq!(comfy.readiness.failure_threshold, 90);
        assert_eq!(
            get("diffusers").unwrap().startup.and_then(|p| p.path()),
            Some("/health")
        );
        for backend in all() {
            assert!(backend.liveness.is_none(), "{}", backend.name);
            let expected = if backend.image_generation {
                IMAGE_IDLE_TIMEOUT
            } else {
                IDLE_TIMEOUT
            };
            assert_eq!(backend.idle_timeout, expected, "{}", backend.name);
        }
        assert!(is_image_generation("comfy"));
        assert!(!is_image_generation("vllm"));
    }

    #[test]
    fn renders_args_and_env_templates() {
        let ctx = ArgContext {
            model: "/models/qwen",
            port: 8080,
        };
        assert_eq!(
            get("llamacpp").unwrap().render_args(ctx),
            [
                "--host",
                "0.0.0.0",
                "--port",
                "8080",
                "--model",
                "/models/qwen"
            ]
        );
        assert_eq!(get("ollama").unwrap().render_args(ctx), ["serve"]);
        let env = get("diffusers").unwrap().render_env(ctx);
        assert!(env.contains(&("MODEL_ID".to_owned(), "/models/qwen".to_owned())));
        assert!(env.contains(&("PORT".to_owned(), "8080".to_owned())));
    }

    #[test]
    fn ports_of_known_and_unknown_backends() {
        assert_eq!(port("llama.cpp"), 8080);
        assert_eq!(port("comfyui"), 8188);
        assert_eq!(port("ollama"), 11434);
        assert_eq!(port("tgi"), FALLBACK_PORT);
    }

    #[test]
    fn rocm_env_is_per_arch() {
        let gfx906 = rocm_env("gfx906");
        assert!(gfx906.contains(&("HSA_OVERRIDE_GFX_VERSION", "9.0.6".to_owned())));
        assert!(gfx906.contains(&("HSA_ENABLE_SDMA", "0".to_owned())));
        let default = rocm_env("");
        assert!(default.contains(&("HSA_OVERRIDE_GFX_VERSION", "11.0.0".to_owned())));
        assert!(default.contains(&("PYTORCH_ROCM_ARCH", "gfx1100".to_owned())));
        assert!(!default.iter().any(|(name, _)| *name == "HSA_ENABLE_SDMA"));
    }
}
