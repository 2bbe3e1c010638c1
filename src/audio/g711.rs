//! G.711 μ-law (ITU-T G.711, the North American and Japanese PCMU of every phone network): one
//! byte per sample at 8 kHz, to and from PCM16. Decoding is a 256-entry table built at compile
//! time from the standard's formula; encoding is the standard's segment search done with a
//! leading-zero count (as the reference `g711.c` of Sun and the ITU's G.191 tools do it).

/// μ-law's bias in 16-bit units (33 on the standard's 14-bit scale).
const BIAS: i32 = 0x84;
/// The largest 14-bit magnitude encoded; louder samples clip to it.
const CLIP_14: i32 = 8159;

/// Every μ-law byte's PCM16 value: G.711 Table 2a's decoder output, scaled from 14 to 16 bits.
pub const DECODE: [i16; 256] = decode_table();

const fn decode_table() -> [i16; 256] {
    let mut table = [0i16; 256];
    let mut code = 0;
    while code < 256 {
        // Bits are sent inverted: sign, three exponent bits, four mantissa bits.
        let inverted = !(code as u8);
        let exponent = ((inverted >> 4) & 0x07) as i32;
        let mantissa = (inverted & 0x0f) as i32;
        let magnitude = (((mantissa << 3) + BIAS) << exponent) - BIAS;
        table[code] = if inverted & 0x80 != 0 {
            -magnitude as i16
        } else {
            magnitude as i16
        };
        code += 1;
    }
    table
}

/// One PCM16 sample as μ-law: on the standard's 14-bit scale, as the reference encoder does.
pub fn encode_sample(sample: i16) -> u8 {
    let value = i32::from(sample) >> 2;
    let (magnitude, mask) = if value < 0 {
        (-value, 0x7f)
    } else {
        (value, 0xff)
    };
    let biased = magnitude.min(CLIP_14) + (BIAS >> 2);
    // Segment s holds biased magnitudes up to 64 << s: the highest set bit above bit 5.
    let segment = biased.ilog2() as i32 - 5;
    let code = if segment > 7 {
        0x7f
    } else {
        (segment << 4) | ((biased >> (segment + 1)) & 0x0f)
    };
    code as u8 ^ mask
}

/// One μ-law byte as PCM16.
pub fn decode_sample(code: u8) -> i16 {
    DECODE[usize::from(code)]
}

/// Appends `ulaw` as PCM16 little-endian to `pcm` (two bytes per input byte).
pub fn decode_into(ulaw: &[u8], pcm: &mut Vec<u8>) {
    pcm.reserve(ulaw.len() * 2);
    for &code in ulaw {
        pcm.extend_from_slice(&decode_sample(code).to_le_bytes());
    }
}

/// Appends PCM16 little-endian `pcm` as μ-law to `ulaw` (an odd last byte is dropped).
pub fn encode_into(pcm: &[u8], ulaw: &mut Vec<u8>) {
    ulaw.reserve(pcm.len() / 2);
    for sample in pcm.chunks_exact(2) {
        ulaw.push(encode_sample(i16::from_le_bytes([sample[0], sample[1]])));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// G.711 Table 2a: for each segment, the character (sent bits, inverted) of its first and
    /// last step and the decoder's output value on the standard's 14-bit scale (±8031).
    const TABLE_2A: [(u8, i32); 18] = [
        (0xff, 0),
        (0xf0, 30),
        (0xef, 33),
        (0xe0, 93),
        (0xdf, 99),
        (0xd0, 219),
        (0xcf, 231),
        (0xc0, 471),
        (0xbf, 495),
        (0xb0, 975),
        (0xaf, 1023),
        (0xa0, 1983),
        (0x9f, 2079),
        (0x90, 3999),
        (0x8f, 4191),
        (0x80, 8031),
        (0x7f, 0),
        (0x00, -8031),
    ];

    #[test]
    fn decoding_matches_the_standard_table() {
        for (code, value14) in TABLE_2A {
            // 14-bit values are 16-bit ones shifted by two.
            assert_eq!(i32::from(decode_sample(code)), value14 * 4, "{code:#04x}");
        }
        // Negative codes mirror the positive ones.
        for code in 0x00..=0x7fu8 {
            assert_eq!(
                decode_sample(code),
                -decode_sample(code | 0x80),
                "{code:#04x}"
            );
        }
    }

    #[test]
    fn the_reference_encoder_s_known_outputs() {
        // As the reference g711.c and every telephony stack give them.
        assert_eq!(encode_sample(0), 0xff);
        assert_eq!(encode_sample(-1), 0x7e);
        assert_eq!(encode_sample(-4), 0x7e);
        assert_eq!(encode_sample(i16::MAX), 0x80);
        assert_eq!(encode_sample(i16::MIN), 0x00);
        assert_eq!(encode_sample(-32_124), 0x00);
        assert_eq!(encode_sample(1000), 0xce);
        assert_eq!(encode_sample(-1000), 0x4e);
    }

    #[test]
    fn every_code_survives_a_round_trip_and_every_sample_gets_its_nearest_step() {
        for code in 0..=255u8 {
            // Negative zero (0x7f) decodes to 0, which encodes as positive zero.
            let expected = if code == 0x7f { 0xff } else { code };
            assert_eq!(encode_sample(decode_sample(code)), expected, "{code:#04x}");
        }
        // The encoder picks the step whose decision interval holds the sample: its output is
        // never further away than that segment's step (the top of the range clips).
        for sample in i16::MIN..=i16::MAX {
            let code = encode_sample(sample);
            let decoded = i32::from(decode_sample(code));
            let segment = (!code >> 4) & 0x07;
            let step = 8 << segment;
            let error = (decoded - i32::from(sample).clamp(-32_124, 32_124)).abs();
            assert!(error <= step, "{sample}: {code:#04x} decodes to {decoded}");
        }
    }

    #[test]
    fn buffers_convert_in_place_of_each_other() {
        let pcm: Vec<u8> = [0i16, 1000, -1000, 8000, -32768]
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect();
        let mut ulaw = Vec::new();
        encode_into(&pcm, &mut ulaw);
        assert_eq!(ulaw, [0xff, 0xce, 0x4e, 0xa0, 0x00]);
        let mut back = Vec::new();
        decode_into(&ulaw, &mut back);
        assert_eq!(back.len(), pcm.len());
        assert_eq!(i16::from_le_bytes([back[2], back[3]]), 988);
    }
}
