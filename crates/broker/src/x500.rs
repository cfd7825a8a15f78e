//! The subject of an X.509 certificate as an RFC 2253 string (`CN=client,OU=eng,O=Example`),
//! the form Kafka's DEFAULT `ssl.principal.mapping.rules` gives a client certificate's
//! principal (Java's `X500Principal.getName()`): relative names last-to-first, `+` inside a
//! multi-valued one, the usual keywords (CN, C, L, ST, O, OU, STREET, DC, UID), other types
//! as dotted OIDs with `#`-hex values, special characters escaped.
//!
//! Also a certificate's subject alternative names ([`subject_alt_names`]), which a dynamic key
//! store update must keep unless `ssl.allow.san.changes` (as Kafka checks them).
//!
//! A small DER reader walks only as far as it needs; anything it cannot read is `None` (the
//! certificate was already verified by rustls or loaded from a store when this runs, so that
//! is not expected).

/// One DER element: its tag, its contents, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // high tag numbers: not in a certificate's subject path
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The fields of the DER certificate `cert`'s TBSCertificate after its version: from the
/// serial number on.
fn to_be_signed(cert: &[u8]) -> Option<&[u8]> {
    let (tag, certificate, _) = element(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, mut tbs, _) = element(certificate)?;
    if tag != SEQUENCE {
        return None;
    }
    if tbs.first() == Some(&0xa0) {
        tbs = element(tbs)?.2; // version [0], optional
    }
    Some(tbs)
}

/// The subject of the DER certificate `cert`, RFC 2253 style.
pub fn subject(cert: &[u8]) -> Option<String> {
    // serial, signature algorithm, issuer, validity, subject.
    let mut tbs = to_be_signed(cert)?;
    for _ in 0..4 {
        tbs = element(tbs)?.2;
    }
    let (tag, mut name, _) = element(tbs)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (tag, mut set, rest) = element(name)?;
        if tag != SET {
            return None;
        }
        let mut parts = Vec::new();
        while !set.is_empty() {
            let (tag, pair, rest) = element(set)?;
            if tag != SEQUENCE {
                return None;
            }
            let (tag, oid, value) = element(pair)?;
            if tag != OID {
                return None;
            }
            parts.push(attribute(oid, value)?);
            set = rest;
        }
        rdns.push(parts.join("+"));
        name = rest;
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// The subject alternative names of the DER certificate `cert`, each as `TYPE:value`
/// (`DNS:broker.example`, `IP:127.0.0.1`, `EMAIL:…`, `URI:…`; other kinds as `[tag]:hex`),
/// sorted; empty when it has none.
pub fn subject_alt_names(cert: &[u8]) -> Option<Vec<String>> {
    // serial, signature algorithm, issuer, validity, subject, subject public key info.
    let mut tbs = to_be_signed(cert)?;
    for _ in 0..6 {
        tbs = element(tbs)?.2;
    }
    let mut names = Vec::new();
    while !tbs.is_empty() {
        let (tag, contents, rest) = element(tbs)?;
        tbs = rest;
        if tag != 0xa3 {
            continue; // issuer / subject unique ids
        }
        let (tag, mut extensions, _) = element(contents)?;
        if tag != SEQUENCE {
            return None;
        }
        while !extensions.is_empty() {
            let (tag, extension, rest) = element(extensions)?;
            extensions = rest;
            if tag != SEQUENCE {
                return None;
            }
            let (tag, oid, mut rest) = element(extension)?;
            if tag != OID || oid != [0x55, 0x1d, 0x11] {
                continue;
            }
            if rest.first() == Some(&0x01) {
                rest = element(rest)?.2; // critical
            }
            let (tag, value, _) = element(rest)?;
            let (seq, mut general, _) = element(value)?;
            if tag != 0x04 || seq != SEQUENCE {
                return None;
            }
            while !general.is_empty() {
                let (tag, name, rest) = element(general)?;
                general = rest;
                names.push(general_name(tag, name));
            }
        }
    }
    names.sort();
    Some(names)
}

/// One GeneralName (RFC 5280) as `TYPE:value`.
fn general_name(tag: u8, value: &[u8]) -> String {
    let text = || String::from_utf8_lossy(value).into_owned();
    match tag {
        0x81 => format!("EMAIL:{}", text()),
        0x82 => format!("DNS:{}", text()),
        0x86 => format!("URI:{}", text()),
        0x87 if value.len() == 4 => format!(
            "IP:{}",
            std::net::Ipv4Addr::from([value[0], value[1], value[2], value[3]])
        ),
        0x87 if value.len() == 16 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(value);
            format!("IP:{}", std::net::Ipv6Addr::from(octets))
        }
        _ => {
            let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
            format!("[{}]:{hex}", tag & 0x1f)
        }
    }
}

/// `TYPE=value` for one attribute: `value` is the DER element after the OID.
fn attribute(oid: &[u8], value: &[u8]) -> Option<String> {
    let keyword = match oid {
        [0x55, 0x04, 0x03] => Some("CN"),
        [0x55, 0x04, 0x06] => Some("C"),
        [0x55, 0x04, 0x07] => Some("L"),
        [0x55, 0x04, 0x08] => Some("ST"),
        [0x55, 0x04, 0x09] => Some("STREET"),
        [0x55, 0x04, 0x0a] => Some("O"),
        [0x55, 0x04, 0x0b] => Some("OU"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => Some("DC"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => Some("UID"),
        _ => None,
    };
    let (tag, text, _) = element(value)?;
    let text = match tag {
        // UTF8String, PrintableString, TeletexString, IA5String
        0x0c | 0x13 | 0x14 | 0x16 => Some(String::from_utf8_lossy(text).into_owned()),
        // BMPString: UTF-16BE
        0x1e if text.len() % 2 == 0 => Some(String::from_utf16_lossy(
            &text
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect::<Vec<_>>(),
        )),
        _ => None,
    };
    Some(match (keyword, text) {
        (Some(keyword), Some(text)) => format!("{keyword}={}", escape(&text)),
        (keyword, _) => {
            let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
            format!(
                "{}=#{hex}",
                keyword.map_or_else(|| dotted(oid), str::to_string)
            )
        }
    })
}

/// An OID's dotted form.
fn dotted(oid: &[u8]) -> String {
    let mut arcs = Vec::new();
    let mut value: u64 = 0;
    for &b in oid {
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (value / 40).min(2);
                arcs.push(first);
                arcs.push(value - first * 40);
            } else {
                arcs.push(value);
            }
            value = 0;
        }
    }
    arcs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

/// RFC 2253 §2.4 escaping.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_no_subject() {
        for bytes in [
            &b""[..],
            b"\x30",
            b"\x30\x03\x02\x01",
            b"\x30\x84\xff\xff\xff\xff",
            b"\x02\x01\x00",
        ] {
            assert_eq!(subject(bytes), None, "{bytes:?}");
        }
    }

    #[test]
    fn escaping_and_oids_follow_rfc_2253() {
        assert_eq!(escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape("#x "), "\\#x\\ ");
        assert_eq!(
            dotted(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]),
            "1.2.840.113549.1.9.1"
        );
    }
}
