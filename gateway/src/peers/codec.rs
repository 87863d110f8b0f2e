//! The wire format of what replicas exchange: which endpoint of which
//! model was sent which prompt blocks, in the order its prefix index
//! touched them. A batch of recent records and a whole snapshot share it.
//!
//! ```text
//! body     = "FXP2" models:varint model*
//! model    = name_len:varint name:utf8 endpoints:varint endpoint*
//! endpoint = addr picks:varint blocks:varint hash:u64le*
//! addr     = 4 ipv4:4 port:u16be | 6 ipv6:16 port:u16be
//! ```
//!
//! `picks` counts the requests the sender routed to the endpoint since its
//! last batch (0 in a snapshot), so that every replica's bound weighs the
//! same load. Bodies of the first version (`"FXP1"`, endpoints without
//! `picks`) are still read, with no picks.
//!
//! Block hashes are random 64-bit values: no encoding or compression
//! shrinks them, so the savings come from sending each block only when an
//! index first learns it (see [`crate::routing::prefix_index`]). Decoding
//! checks every length against the bytes left before allocating and
//! never panics.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The first bytes of every body: format and version.
pub const MAGIC: &[u8; 4] = b"FXP2";

/// The first version's magic, still accepted.
const MAGIC_V1: &[u8; 4] = b"FXP1";

/// Longest model name accepted.
const MAX_NAME_LEN: usize = 1024;

/// The blocks one endpoint of one model received, in touch order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointBlocks {
    /// The endpoint.
    pub addr: SocketAddr,
    /// Requests the sender routed there since its last batch.
    pub picks: u32,
    /// Block hashes in the order the sender's index touched them.
    pub hashes: Vec<u64>,
}

/// One model's records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelBlocks {
    /// Canonical model name.
    pub model: String,
    /// Its endpoints' records.
    pub endpoints: Vec<EndpointBlocks>,
}

/// Why a body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not this format or version.
    #[error("not a peer records body")]
    Magic,
    /// The body ends inside a field.
    #[error("truncated body")]
    Truncated,
    /// A field is out of range (length, address family, UTF-8).
    #[error("malformed body: {0}")]
    Malformed(&'static str),
}

/// Encodes `models` (skipping endpoints without blocks or picks and models
/// without endpoints); returns the body and the number of blocks in it.
pub fn encode(models: &[ModelBlocks]) -> (Vec<u8>, usize) {
    let kept: Vec<(&ModelBlocks, Vec<&EndpointBlocks>)> = models
        .iter()
        .map(|m| {
            (
                m,
                m.endpoints
                    .iter()
                    .filter(|e| !e.hashes.is_empty() || e.picks > 0)
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(m, e)| !e.is_empty() && m.model.len() <= MAX_NAME_LEN)
        .collect();
    let blocks: usize = kept
        .iter()
        .flat_map(|(_, e)| e.iter().map(|e| e.hashes.len()))
        .sum();
    let mut out = Vec::with_capacity(8 + blocks * 8 + kept.len() * 64);
    out.extend_from_slice(MAGIC);
    put_varint(&mut out, kept.len() as u64);
    for (model, endpoints) in kept {
        put_varint(&mut out, model.model.len() as u64);
        out.extend_from_slice(model.model.as_bytes());
        put_varint(&mut out, endpoints.len() as u64);
        for endpoint in endpoints {
            match endpoint.addr.ip() {
                IpAddr::V4(ip) => {
                    out.push(4);
                    out.extend_from_slice(&ip.octets());
                }
                IpAddr::V6(ip) => {
                    out.push(6);
                    out.extend_from_slice(&ip.octets());
                }
            }
            out.extend_from_slice(&endpoint.addr.port().to_be_bytes());
            put_varint(&mut out, u64::from(endpoint.picks));
            put_varint(&mut out, endpoint.hashes.len() as u64);
            for hash in &endpoint.hashes {
                out.extend_from_slice(&hash.to_le_bytes());
            }
        }
    }
    (out, blocks)
}

/// Decodes a body made by [`encode`].
pub fn decode(body: &[u8]) -> Result<Vec<ModelBlocks>, DecodeError> {
    let mut r = Reader(body);
    let with_picks = match r.take(MAGIC.len()).map_err(|_| DecodeError::Magic)? {
        m if m == MAGIC => true,
        m if m == MAGIC_V1 => false,
        _ => return Err(DecodeError::Magic),
    };
    // Every model takes at least 3 bytes, every endpoint 8: counts larger
    // than the bytes left can support are refused before allocating.
    let models = r.count(3)?;
    let mut out = Vec::with_capacity(models);
    for _ in 0..models {
        let len = r.varint()?;
        if len > MAX_NAME_LEN as u64 {
            return Err(DecodeError::Malformed("model name too long"));
        }
        let name = std::str::from_utf8(r.take(len as usize)?)
            .map_err(|_| DecodeError::Malformed("model name is not UTF-8"))?
            .to_owned();
        let endpoints = r.count(8)?;
        let mut list = Vec::with_capacity(endpoints);
        for _ in 0..endpoints {
            let ip = match r.take(1)?[0] {
                4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>()?)),
                6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>()?)),
                _ => return Err(DecodeError::Malformed("address family")),
            };
            let port = u16::from_be_bytes(r.array::<2>()?);
            let picks = if with_picks {
                u32::try_from(r.varint()?).map_err(|_| DecodeError::Malformed("picks"))?
            } else {
                0
            };
            let blocks = r.count(8)?;
            let hashes = (0..blocks)
                .map(|_| r.array::<8>().map(u64::from_le_bytes))
                .collect::<Result<Vec<u64>, _>>()?;
            list.push(EndpointBlocks {
                addr: SocketAddr::new(ip, port),
                picks,
                hashes,
            });
        }
        out.push(ModelBlocks {
            model: name,
            endpoints: list,
        });
    }
    if !r.0.is_empty() {
        return Err(DecodeError::Malformed("trailing bytes"));
    }
    Ok(out)
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.0.len() {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::Malformed("varint too long"))
    }

    /// A count of items taking at least `min_size` bytes each.
    fn count(&mut self, min_size: usize) -> Result<usize, DecodeError> {
        let n = self.varint()?;
        if n > (self.0.len() / min_size) as u64 {
            return Err(DecodeError::Truncated);
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<ModelBlocks> {
        vec![
            ModelBlocks {
                model: "llama-3-8b".into(),
                endpoints: vec![
                    EndpointBlocks {
                        addr: "10.0.0.1:8000".parse().unwrap(),
                        picks: 3,
                        hashes: vec![1, u64::MAX, 0x0123_4567_89ab_cdef],
                    },
                    EndpointBlocks {
                        addr: "[fd00::7]:9000".parse().unwrap(),
                        picks: 0,
                        hashes: vec![42],
                    },
                    EndpointBlocks {
                        addr: "10.0.0.3:8000".parse().unwrap(),
                        picks: 700,
                        hashes: vec![],
                    },
                ],
            },
            ModelBlocks {
                model: "modèle".into(),
                endpoints: vec![EndpointBlocks {
                    addr: "10.0.0.2:8000".parse().unwrap(),
                    picks: 1,
                    hashes: (0..300).collect(),
                }],
            },
        ]
    }

    #[test]
    fn round_trip() {
        let models = sample();
        let (body, blocks) = encode(&models);
        assert_eq!(blocks, 304);
        // 8 bytes per block, plus a few per model and endpoint.
        assert!(body.len() < blocks * 8 + 100, "{}", body.len());
        assert_eq!(decode(&body).unwrap(), models);
    }

    #[test]
    fn first_version_bodies_are_read_without_picks() {
        let mut v1 = MAGIC_V1.to_vec();
        // One model "m", one endpoint 10.0.0.1:8000 with blocks 7 and 9.
        v1.extend_from_slice(&[1, 1, b'm', 1, 4, 10, 0, 0, 1, 0x1f, 0x40, 2]);
        v1.extend_from_slice(&7u64.to_le_bytes());
        v1.extend_from_slice(&9u64.to_le_bytes());
        let models = decode(&v1).unwrap();
        assert_eq!(
            models,
            [ModelBlocks {
                model: "m".into(),
                endpoints: vec![EndpointBlocks {
                    addr: "10.0.0.1:8000".parse().unwrap(),
                    picks: 0,
                    hashes: vec![7, 9],
                }],
            }]
        );
    }

    #[test]
    fn empty_records_are_left_out() {
        let models = vec![
            ModelBlocks {
                model: "m".into(),
                endpoints: vec![EndpointBlocks {
                    addr: "10.0.0.1:1".parse().unwrap(),
                    picks: 0,
                    hashes: vec![],
                }],
            },
            ModelBlocks::default(),
        ];
        let (body, blocks) = encode(&models);
        assert_eq!(blocks, 0);
        assert_eq!(decode(&body).unwrap(), Vec::new());
    }

    #[test]
    fn garbage_is_refused_without_panicking() {
        assert_eq!(decode(b""), Err(DecodeError::Magic));
        assert_eq!(decode(b"FXP9\0"), Err(DecodeError::Magic));
        let (body, _) = encode(&sample());
        // Every truncation and every single-byte change decodes or is refused.
        for len in 0..body.len() {
            assert!(decode(&body[..len]).is_err(), "truncated at {len}");
        }
        for pos in 0..body.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = body.clone();
                bad[pos] ^= flip;
                let _ = decode(&bad);
            }
        }
        // Huge counts claim more than the body holds.
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert!(decode(&huge).is_err());
        // Pseudo-random bodies behind a valid magic.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let mut body = MAGIC.to_vec();
            for _ in 0..(state % 64) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                body.push(state as u8);
            }
            let _ = decode(&body);
        }
        let mut trailing = body.clone();
        trailing.push(0);
        assert!(decode(&trailing).is_err());
    }
}
