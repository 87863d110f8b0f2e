//! What the benchmark sends: prompt and output length distributions and the
//! request bodies built from them (prepared before the clock starts, so the
//! load generator only copies bytes).

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::target::Api;

/// Longest length accepted in a distribution.
pub const MAX_LENGTH: u32 = 1_000_000;

/// A distribution of token counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Length {
    /// Always this many: `128`.
    Fixed(u32),
    /// Uniform over an inclusive range: `64..256`.
    Uniform(u32, u32),
    /// Normal, rounded and clamped to at least 1: `normal:128,32`.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        sd: f64,
    },
}

impl Length {
    /// Draws one length (at least 1).
    pub fn sample(&self, rng: &mut impl Rng) -> u32 {
        match *self {
            Length::Fixed(n) => n,
            Length::Uniform(lo, hi) => rng.random_range(lo..=hi),
            Length::Normal { mean, sd } => {
                // Box-Muller: two uniforms give one standard normal.
                let u1: f64 = rng.random_range(f64::EPSILON..1.0);
                let u2: f64 = rng.random();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (mean + sd * z).round().clamp(1.0, f64::from(MAX_LENGTH)) as u32
            }
        }
        .max(1)
    }
}

impl FromStr for Length {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let bad = || format!("invalid length {text:?}: use N, LO..HI or normal:MEAN,SD");
        let number = |s: &str| -> Result<u32, String> {
            let n: u32 = s.trim().parse().map_err(|_| bad())?;
            if n == 0 || n > MAX_LENGTH {
                return Err(format!("length {n} must be between 1 and {MAX_LENGTH}"));
            }
            Ok(n)
        };
        if let Some(rest) = text.strip_prefix("normal:") {
            let (mean, sd) = rest.split_once(',').ok_or_else(bad)?;
            let mean: f64 = mean.trim().parse().map_err(|_| bad())?;
            let sd: f64 = sd.trim().parse().map_err(|_| bad())?;
            if !(1.0..=f64::from(MAX_LENGTH)).contains(&mean) || !(0.0..=mean * 10.0).contains(&sd)
            {
                return Err(format!(
                    "normal:{mean},{sd} needs 1 <= mean <= {MAX_LENGTH} and 0 <= sd"
                ));
            }
            return Ok(Length::Normal { mean, sd });
        }
        if let Some((lo, hi)) = text.split_once("..") {
            let (lo, hi) = (number(lo)?, number(hi)?);
            if lo > hi {
                return Err(format!("range {lo}..{hi} is empty"));
            }
            return Ok(Length::Uniform(lo, hi));
        }
        number(text).map(Length::Fixed)
    }
}

impl fmt::Display for Length {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Length::Fixed(n) => write!(f, "{n}"),
            Length::Uniform(lo, hi) => write!(f, "{lo}..{hi}"),
            Length::Normal { mean, sd } => write!(f, "normal:{mean},{sd}"),
        }
    }
}

/// Short, common English words: one token each in the usual tokenizers.
pub const WORDS: [&str; 32] = [
    "the", "of", "and", "to", "in", "is", "it", "that", "for", "on", "was", "with", "as", "at",
    "be", "by", "this", "from", "or", "an", "are", "not", "but", "have", "all", "one", "can",
    "new", "more", "time", "like", "when",
];

/// A prompt of `tokens` words, different for each `index` (so prefix caches
/// do not turn the benchmark into a cache benchmark).
pub fn prompt(tokens: u32, index: u64, rng: &mut impl Rng) -> String {
    let mut text = format!("request-{index}:");
    for _ in 1..tokens {
        text.push(' ');
        text.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
    text
}

/// The request shape.
#[derive(Debug, Clone)]
pub struct Workload {
    /// API measured.
    pub api: Api,
    /// `model` field.
    pub model: String,
    /// Prompt length distribution.
    pub prompt_tokens: Length,
    /// Output length distribution (`max_tokens`).
    pub max_tokens: Length,
    /// Stream responses.
    pub stream: bool,
    /// Send `ignore_eos: true` (vLLM) so every answer has exactly `max_tokens`.
    pub ignore_eos: bool,
}

/// One prepared request.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    /// The JSON body.
    pub body: Bytes,
    /// Prompt length asked for.
    pub prompt_tokens: u32,
    /// `max_tokens` asked for.
    pub max_tokens: u32,
}

impl Workload {
    /// The JSON body of one request.
    pub fn body(&self, prompt_text: &str, max_tokens: u32) -> Bytes {
        let mut body = match self.api {
            Api::Chat => json!({
                "model": self.model,
                "messages": [{"role": "user", "content": prompt_text}],
                "max_tokens": max_tokens,
                "stream": self.stream,
            }),
            Api::Completions => json!({
                "model": self.model,
                "prompt": prompt_text,
                "max_tokens": max_tokens,
                "stream": self.stream,
            }),
        };
        if self.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        if self.ignore_eos {
            body["ignore_eos"] = json!(true);
        }
        Bytes::from(body.to_string())
    }

    /// `count` requests drawn from the distributions with `seed`.
    pub fn prepare(&self, count: usize, seed: u64) -> Vec<PreparedRequest> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..count.max(1))
            .map(|i| {
                let prompt_tokens = self.prompt_tokens.sample(&mut rng);
                let max_tokens = self.max_tokens.sample(&mut rng);
                let text = prompt(prompt_tokens, i as u64, &mut rng);
                PreparedRequest {
                    body: self.body(&text, max_tokens),
                    prompt_tokens,
                    max_tokens,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lengths() {
        assert_eq!("128".parse(), Ok(Length::Fixed(128)));
        assert_eq!("64..256".parse(), Ok(Length::Uniform(64, 256)));
        assert_eq!(
            "normal:100,10".parse(),
            Ok(Length::Normal {
                mean: 100.0,
                sd: 10.0
            })
        );
        for bad in ["0", "-1", "5..2", "normal:5", "x", "normal:0,1", "2000000"] {
            assert!(bad.parse::<Length>().is_err(), "{bad}");
        }
        assert_eq!(Length::Uniform(1, 2).to_string(), "1..2");
    }

    #[test]
    fn samples_stay_in_range() {
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..1000 {
            let n = Length::Uniform(10, 20).sample(&mut rng);
            assert!((10..=20).contains(&n));
            assert!(
                Length::Normal {
                    mean: 5.0,
                    sd: 50.0
                }
                .sample(&mut rng)
                    >= 1
            );
        }
        let mean = (0..10_000)
            .map(|_| {
                f64::from(
                    Length::Normal {
                        mean: 100.0,
                        sd: 10.0,
                    }
                    .sample(&mut rng),
                )
            })
            .sum::<f64>()
            / 10_000.0;
        assert!((mean - 100.0).abs() < 1.0, "{mean}");
    }

    #[test]
    fn prompts_have_the_requested_word_count() {
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(prompt(50, 7, &mut rng).split_whitespace().count(), 50);
        assert_eq!(prompt(1, 7, &mut rng), "request-7:");
    }

    #[test]
    fn bodies_carry_the_stream_options() {
        let w = Workload {
            api: Api::Chat,
            model: "m".into(),
            prompt_tokens: Length::Fixed(3),
            max_tokens: Length::Fixed(9),
            stream: true,
            ignore_eos: true,
        };
        let r = &w.prepare(2, 5)[1];
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["max_tokens"], 9);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(
            v["messages"][0]["content"]
                .as_str()
                .unwrap()
                .split_whitespace()
                .count(),
            3
        );
        let w = Workload {
            api: Api::Completions,
            stream: false,
            ignore_eos: false,
            ..w
        };
        let v: serde_json::Value = serde_json::from_slice(&w.prepare(1, 5)[0].body).unwrap();
        assert!(v.get("stream_options").is_none() && v["prompt"].is_string());
    }
}
