//! Where measured tokens/s are published and found: the benchmarker writes
//! them under these keys, the scheduler extender reads them. One
//! implementation, so that both always agree.

use sha2::{Digest, Sha256};

/// Prefix of the keys of the global benchmark ConfigMap.
pub const KEY_PREFIX: &str = "bench_";

/// The GPU labels of a node that make up its device class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceLabels<'a> {
    /// `flexinfer.ai/gpu.vendor`.
    pub vendor: &'a str,
    /// `flexinfer.ai/gpu.arch`.
    pub arch: &'a str,
    /// `flexinfer.ai/gpu.vram` (`24Gi`).
    pub vram: &'a str,
    /// `flexinfer.ai/gpu.count`.
    pub count: &'a str,
    /// `flexinfer.ai/gpu.int4`.
    pub int4: &'a str,
}

impl DeviceLabels<'_> {
    /// The device class: `vendor=<v>,arch=<a>,vram=<m>,count=<c>,int4=<i>`,
    /// missing labels empty.
    pub fn device_class(&self) -> String {
        format!(
            "vendor={},arch={},vram={},count={},int4={}",
            self.vendor, self.arch, self.vram, self.count, self.int4
        )
    }
}

/// The first 16 bytes of SHA-256(`backend|model|deviceClass`), as 32
/// lower-case hex digits.
pub fn result_hash(backend: &str, model: &str, device_class: &str) -> String {
    let mut hasher = Sha256::new();
    for (i, part) in [backend, model, device_class].iter().enumerate() {
        if i > 0 {
            hasher.update(b"|");
        }
        hasher.update(part.as_bytes());
    }
    hex::encode(&hasher.finalize()[..16])
}

/// Key of a result in the global ConfigMap: [`KEY_PREFIX`] and
/// [`result_hash`].
pub fn key(backend: &str, model: &str, device_class: &str) -> String {
    format!("{KEY_PREFIX}{}", result_hash(backend, model, device_class))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_sha256_computed_elsewhere() {
        // Expected values from `hashlib.sha256(b"...").hexdigest()[:32]`.
        let class = DeviceLabels {
            vendor: "AMD",
            arch: "gfx1100",
            vram: "23Gi",
            count: "1",
            int4: "true",
        }
        .device_class();
        assert_eq!(class, "vendor=AMD,arch=gfx1100,vram=23Gi,count=1,int4=true");
        assert_eq!(key("vllm", "qwen", &class), format!("bench_{}", KNOWN_AMD));
        let empty = DeviceLabels::default().device_class();
        assert_eq!(empty, "vendor=,arch=,vram=,count=,int4=");
        assert_eq!(result_hash("vllm", "m", &empty), KNOWN_EMPTY);
        assert_eq!(result_hash("", "", ""), KNOWN_BARS);
    }

    const KNOWN_AMD: &str = "2dc7831223b36b31280a67d2f78b24e1";
    const KNOWN_EMPTY: &str = "346725be31e9d1e1ff5504b6a5922e95";
    const KNOWN_BARS: &str = "565d240f5343e625ae579a4d45a770f1";
}
