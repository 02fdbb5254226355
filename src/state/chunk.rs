//! A chunk: part of one bin's state, a bounded run of `(key, value)`
//! entries, postcard-encoded with a CRC-32 trailer.

use serde::{Deserialize, Serialize};

use super::BinEntries;

/// Entries of one bin; keys and values are the operator's own encoding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Chunk {
    pub(crate) entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Chunk {
    /// Bytes the encoded chunk will take, roughly (for sizing chunks).
    pub(crate) fn entry_size(key: &[u8], value: &[u8]) -> usize {
        key.len() + value.len() + 4
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        seal(postcard::to_stdvec(self).expect("a chunk always encodes"))
    }
}

/// The bytes of a [`Chunk`] of `entries`, without copying them into one:
/// postcard writes a struct of one field as that field, and a borrowed
/// slice as it writes a `Vec`, so these are a `Chunk`'s bytes.
pub(crate) fn encode_entries(entries: &[(&[u8], &[u8])]) -> Vec<u8> {
    seal(postcard::to_stdvec(entries).expect("a chunk always encodes"))
}

/// Checks the trailer and decodes; `Err` names what is wrong.
pub(crate) fn decode_chunk(bytes: &[u8]) -> Result<Chunk, String> {
    let payload = verify(bytes)?;
    postcard::from_bytes(payload).map_err(|e| format!("undecodable chunk: {e}"))
}

/// Checks the trailer and decodes into one buffer: a few allocations per
/// chunk instead of two per entry (the keys and values are borrowed from
/// the payload while they are copied over).
pub(crate) fn decode_chunk_entries(bytes: &[u8]) -> Result<BinEntries, String> {
    let payload = verify(bytes)?;
    let pairs: Vec<(&[u8], &[u8])> =
        postcard::from_bytes(payload).map_err(|e| format!("undecodable chunk: {e}"))?;
    Ok(pairs.into_iter().collect())
}

/// The payload of checksummed bytes, if the checksum matches.
pub(crate) fn verify(bytes: &[u8]) -> Result<&[u8], String> {
    if bytes.len() < 4 {
        return Err("truncated (shorter than its checksum)".into());
    }
    let (payload, crc) = bytes.split_at(bytes.len() - 4);
    let expected = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
    if crc32fast::hash(payload) != expected {
        return Err("checksum mismatch".into());
    }
    Ok(payload)
}

/// Appends a CRC-32 trailer.
pub(crate) fn seal(mut payload: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    payload
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_trip_and_any_flipped_bit_is_caught() {
        let c = Chunk {
            entries: vec![(b"k1".to_vec(), b"v1".to_vec()), (vec![], vec![0; 300])],
        };
        let bytes = c.encode();
        assert_eq!(decode_chunk(&bytes).unwrap(), c);
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    decode_chunk(&bad).is_err(),
                    "flip at byte {i} bit {bit} went unnoticed"
                );
            }
        }
        assert!(decode_chunk(&bytes[..3]).is_err());
    }

    #[test]
    fn borrowed_entries_encode_as_the_chunk_of_them() {
        let c = Chunk {
            entries: vec![
                (b"k1".to_vec(), b"v1".to_vec()),
                (vec![], vec![7; 300]),
                (vec![1; 200], vec![]),
            ],
        };
        let borrowed: Vec<(&[u8], &[u8])> = c
            .entries
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        assert_eq!(encode_entries(&borrowed), c.encode());
        let flat = decode_chunk_entries(&c.encode()).unwrap();
        assert_eq!(flat.to_pairs(), c.entries);
        assert_eq!(encode_entries(&[]), Chunk::default().encode());
    }
}
