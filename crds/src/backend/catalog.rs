//! The backend table: one entry per inference server, with the values of
//! the original implementation (images, ports, probes, architecture
//! support).

use std::time::Duration;

use super::{
    ArchSupport, Backend, ImageRule, Probe, ProbeAction, SupportLevel, MODEL_PLACEHOLDER,
    PORT_PLACEHOLDER,
};
use crate::defaults::{IDLE_TIMEOUT, IMAGE_IDLE_TIMEOUT};
use crate::gpu::Vendor;
use crate::v1alpha2::QuantizationFormat;

const GPU_VENDORS: &[Vendor] = &[Vendor::Nvidia, Vendor::Amd];

/// Architecture table shared by backends that run everywhere, Maxwell
/// included.
const ARCH_ALL: &[ArchSupport] = &[
    arch("gfx110", SupportLevel::Full, 24_576),
    arch("gfx90a", SupportLevel::Full, 65_536),
    arch("gfx942", SupportLevel::Full, 196_608),
    arch("gfx906", SupportLevel::Full, 16_384),
    arch("sm_5", SupportLevel::Full, 6_144),
];

/// Architecture table of PyTorch-based servers, which need FP16 hardware
/// (no Maxwell).
const ARCH_NO_MAXWELL: &[ArchSupport] = &[
    arch("gfx110", SupportLevel::Full, 24_576),
    arch("gfx90a", SupportLevel::Full, 65_536),
    arch("gfx942", SupportLevel::Full, 196_608),
    arch("gfx906", SupportLevel::Full, 16_384),
    arch("sm_5", SupportLevel::Unsupported, 0),
];

const fn arch(prefix: &'static str, level: SupportLevel, max_vram_mb: i64) -> ArchSupport {
    ArchSupport {
        prefix,
        level,
        max_vram_mb,
    }
}

const fn image(
    vendor: Option<Vendor>,
    arch_prefix: &'static str,
    env: &'static str,
    default: &'static str,
) -> ImageRule {
    ImageRule {
        vendor,
        arch_prefix,
        env,
        default,
    }
}

const AMD: Option<Vendor> = Some(Vendor::Amd);
const NVIDIA: Option<Vendor> = Some(Vendor::Nvidia);
const ANY: Option<Vendor> = None;

/// Every backend, in the order the documentation lists them.
pub(super) static CATALOG: &[Backend] = &[
    Backend {
        name: "ollama",
        aliases: &[],
        port: 11434,
        command: &[],
        args: &["serve"],
        env: &[("OLLAMA_HOST", "0.0.0.0"), ("OLLAMA_KEEP_ALIVE", "-1")],
        images: &[
            image(AMD, "gfx110", "DEFAULT_OLLAMA_IMAGE_GFX1100", ""),
            image(AMD, "gfx906", "DEFAULT_OLLAMA_IMAGE_GFX906", ""),
            image(AMD, "", "DEFAULT_BACKEND_IMAGE_AMD", "ollama/ollama:rocm"),
            image(
                Some(Vendor::Intel),
                "",
                "DEFAULT_BACKEND_IMAGE_INTEL",
                "ollama/ollama:latest",
            ),
            image(NVIDIA, "sm_5", "DEFAULT_BACKEND_IMAGE_MAXWELL", ""),
            image(NVIDIA, "", "DEFAULT_BACKEND_IMAGE_NVIDIA", ""),
            image(ANY, "", "DEFAULT_BACKEND_IMAGE", "ollama/ollama:latest"),
        ],
        readiness: Probe::http("/", 10, 10, 5),
        startup: None,
        liveness: None,
        vendors: GPU_VENDORS,
        architectures: ARCH_ALL,
        startup_timeout: Duration::from_secs(60),
        idle_timeout: IDLE_TIMEOUT,
        needs_volume: false,
        image_generation: false,
        supports_lora: false,
        quantization_formats: &[QuantizationFormat::Gguf],
    },
    Backend {
        name: "vllm",
        aliases: &[],
        port: 8000,
        command: &[],
        args: &[
            "--host",
            "0.0.0.0",
            "--port",
            PORT_PLACEHOLDER,
            "--model",
            MODEL_PLACEHOLDER,
        ],
        env: &[("CUDA_DEVICE_ORDER", "PCI_BUS_ID")],
        images: &[
            image(
                AMD,
                "gfx110",
                "DEFAULT_VLLM_IMAGE_GFX1100",
                "registry.harbor.lan/flexinfer/vllm:rocm-gfx1100-fa",
            ),
            image(
                AMD,
                "gfx906",
                "DEFAULT_VLLM_IMAGE_GFX906",
                "registry.harbor.lan/flexinfer/vllm:rocm-gfx906",
            ),
            image(AMD, "", "DEFAULT_VLLM_IMAGE_AMD", "rocm/vllm:latest"),
            image(ANY, "", "DEFAULT_VLLM_IMAGE", "vllm/vllm-openai:latest"),
        ],
        readiness: Probe::http("/health", 10, 10, 5),
        startup: None,
        liveness: None,
        vendors: GPU_VENDORS,
        architectures: ARCH_NO_MAXWELL,
        startup_timeout: Duration::from_secs(300),
        idle_timeout: IDLE_TIMEOUT,
        needs_volume: true,
        image_generation: false,
        supports_lora: true,
        quantization_formats: &[
            QuantizationFormat::Awq,
            QuantizationFormat::Gptq,
            QuantizationFormat::Fp8,
            QuantizationFormat::Gguf,
        ],
    },
    Backend {
        name: "mlc-llm",
        aliases: &["mlc", "mlc_llm", "mlc-llm-chat"],
        port: 8000,
        command: &["python", "-m", "mlc_llm"],
        args: &[
            "serve",
            MODEL_PLACEHOLDER,
            "--host",
            "0.0.0.0",
            "--port",
            PORT_PLACEHOLDER,
        ],
        env: &[],
        images: &[
            image(
                AMD,
                "",
                "DEFAULT_MLC_LLM_IMAGE_AMD",
                "ghcr.io/mlc-ai/mlc-llm:rocm",
            ),
            image(
                NVIDIA,
                "sm_5",
                "DEFAULT_MLC_LLM_IMAGE_MAXWELL",
                "registry.harbor.lan/flexinfer/mlc-llm:cuda-maxwell-v7",
            ),
            image(
                ANY,
                "",
                "DEFAULT_MLC_LLM_IMAGE",
                "ghcr.io/mlc-ai/mlc-llm:cuda",
            ),
        ],
        readiness: Probe::http("/v1/models", 10, 10, 5),
        startup: None,
        liveness: None,
        vendors: GPU_VENDORS,
        architectures: &[
            arch("gfx110", SupportLevel::Full, 24_576),
            arch("gfx90a", SupportLevel::Full, 65_536),
            arch("gfx942", SupportLevel::Full, 196_608),
            arch("gfx906", SupportLevel::Experimental, 16_384),
            arch("sm_5", SupportLevel::Full, 6_144),
        ],
        startup_timeout: Duration::from_secs(90),
        idle_timeout: IDLE_TIMEOUT,
        needs_volume: true,
        image_generation: false,
        supports_lora: false,
        quantization_formats: &[],
    },
    Backend {
        name: "llamacpp",
        aliases: &["llama.cpp", "llama-cpp", "llama_cpp"],
        port: 8080,
        // The image's own entrypoint: the official llama.cpp server images
        // (the defaults below) start llama-server from theirs, and have
        // nothing at the original's `/opt/src/llama.cpp/build/bin` path.
        command: &[],
        args: &[
            "--host",
            "0.0.0.0",
            "--port",
            PORT_PLACEHOLDER,
            "--model",
            MODEL_PLACEHOLDER,
        ],
        env: &[],
        images: &[
            image(AMD, "gfx110", "DEFAULT_LLAMA_CPP_IMAGE_GFX1100", ""),
            image(AMD, "gfx906", "DEFAULT_LLAMA_CPP_IMAGE_GFX906", ""),
            image(
                AMD,
                "",
                "DEFAULT_LLAMA_CPP_IMAGE_AMD",
                "ghcr.io/ggerganov/llama.cpp:server-rocm",
            ),
            image(
                Some(Vendor::Cpu),
                "",
                "DEFAULT_LLAMA_CPP_IMAGE_CPU",
                "ghcr.io/ggerganov/llama.cpp:server",
            ),
            image(NVIDIA, "sm_5", "DEFAULT_LLAMA_CPP_IMAGE_MAXWELL", ""),
            image(
                ANY,
                "",
                "DEFAULT_LLAMA_CPP_IMAGE",
                "ghcr.io/ggerganov/llama.cpp:server-cuda",
            ),
        ],
        readiness: Probe::http("/health", 10, 10, 5),
        startup: None,
        liveness: None,
        vendors: &[Vendor::Nvidia, Vendor::Amd, Vendor::Cpu],
        architectures: ARCH_ALL,
        startup_timeout: Duration::from_secs(60),
        idle_timeout: IDLE_TIMEOUT,
        needs_volume: true,
        image_generation: false,
        supports_lora: false,
        quantization_formats: &[QuantizationFormat::Gguf],
    },
    Backend {
        name: "diffusers",
        aliases: &[],
        port: 8000,
        command: &[],
        args: &[],
        env: &[
            ("MODEL_ID", MODEL_PLACEHOLDER),
            ("MODEL", MODEL_PLACEHOLDER),
            ("PORT", PORT_PLACEHOLDER),
        ],
        images: &[
            image(AMD, "gfx110", "DEFAULT_DIFFUSERS_IMAGE_GFX1100", ""),
            image(AMD, "gfx906", "DEFAULT_DIFFUSERS_IMAGE_GFX906", ""),
            image(
                AMD,
                "",
                "DEFAULT_DIFFUSERS_IMAGE_AMD",
                "registry.harbor.lan/library/diffusers-api:rocm-latest",
            ),
            image(
                ANY,
                "",
                "DEFAULT_DIFFUSERS_IMAGE",
                "registry.harbor.lan/library/diffusers-api:cuda",
            ),
        ],
        readiness: Probe {
            action: ProbeAction::Tcp,
            initial_delay_seconds: 0,
            period_seconds: 5,
            timeout_seconds: 3,
            failure_threshold: 3,
        },
        startup: Some(Probe {
            action: ProbeAction::Http("/health"),
            initial_delay_seconds: 0,
            period_seconds: 10,
            timeout_seconds: 5,
            failure_threshold: 90,
        }),
        liveness: None,
        vendors: GPU_VENDORS,
        architectures: ARCH_NO_MAXWELL,
        startup_timeout: Duration::from_secs(900),
        idle_timeout: IMAGE_IDLE_TIMEOUT,
        needs_volume: true,
        image_generation: true,
        supports_lora: false,
        quantization_formats: &[],
    },
    Backend {
        name: "comfyui",
        aliases: &["comfy", "comfy-ui", "comfy_ui"],
        port: 8188,
        command: &["python", "main.py"],
        args: &[
            "--listen",
            "0.0.0.0",
            "--port",
            PORT_PLACEHOLDER,
            "--enable-cors-header",
        ],
        env: &[
            ("COMFYUI_OUTPUT_DIRECTORY", "/output"),
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        ],
        images: &[
            image(
                AMD,
                "gfx110",
                "DEFAULT_COMFYUI_IMAGE_GFX1100",
                "registry.harbor.lan/flexinfer/comfyui:rocm-gfx1100",
            ),
            image(
                AMD,
                "gfx906",
                "DEFAULT_COMFYUI_IMAGE_GFX906",
                "registry.harbor.lan/flexinfer/comfyui:rocm-gfx906",
            ),
            image(
                AMD,
                "",
                "DEFAULT_COMFYUI_IMAGE_AMD",
                "registry.harbor.lan/library/comfyui:rocm6.2.3-v8",
            ),
            image(
                ANY,
                "",
                "DEFAULT_COMFYUI_IMAGE",
                "comfyanonymous/comfyui:latest",
            ),
        ],
        readiness: Probe::tcp(10, 10, 5),
        startup: None,
        liveness: None,
        vendors: GPU_VENDORS,
        architectures: &[
            arch("gfx110", SupportLevel::Full, 24_576),
            arch("gfx90a", SupportLevel::Full, 65_536),
            arch("gfx942", SupportLevel::Full, 196_608),
            arch("gfx906", SupportLevel::Experimental, 16_384),
            arch("sm_5", SupportLevel::Unsupported, 0),
        ],
        startup_timeout: Duration::from_secs(180),
        idle_timeout: IMAGE_IDLE_TIMEOUT,
        needs_volume: true,
        image_generation: true,
        supports_lora: false,
        quantization_formats: &[],
    },
    Backend {
        name: "vllm-omni",
        aliases: &["vllm-diffusion", "vllm_omni"],
        port: 8000,
        command: &[],
        args: &[
            "--host",
            "0.0.0.0",
            "--port",
            PORT_PLACEHOLDER,
            "--model",
            MODEL_PLACEHOLDER,
        ],
        env: &[("CUDA_DEVICE_ORDER", "PCI_BUS_ID")],
        images: &[
            image(AMD, "gfx110", "DEFAULT_VLLM_OMNI_IMAGE_GFX1100", ""),
            image(
                AMD,
                "",
                "DEFAULT_VLLM_OMNI_IMAGE_AMD",
                "registry.harbor.lan/flexinfer/vllm-omni:rocm-gfx1100",
            ),
            image(
                ANY,
                "",
                "DEFAULT_VLLM_OMNI_IMAGE",
                "vllm/vllm-openai:latest",
            ),
        ],
        readiness: Probe::http("/health", 0, 5, 3),
        startup: Some(Probe {
            action: ProbeAction::Http("/health"),
            initial_delay_seconds: 0,
            period_seconds: 10,
            timeout_seconds: 5,
            failure_threshold: 30,
        }),
        liveness: None,
        vendors: GPU_VENDORS,
        architectures: ARCH_NO_MAXWELL,
        startup_timeout: Duration::from_secs(300),
        idle_timeout: IMAGE_IDLE_TIMEOUT,
        needs_volume: true,
        image_generation: true,
        supports_lora: false,
        quantization_formats: &[
            QuantizationFormat::Awq,
            QuantizationFormat::Gptq,
            QuantizationFormat::Fp8,
        ],
    },
];
