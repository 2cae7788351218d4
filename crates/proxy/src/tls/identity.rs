//! The identities a verified client certificate can prove (`ingress.trusted_identities`): a DNS
//! name or an IP address, as a server certificate is checked (webpki, its DNS and IP SANs); or a
//! SPIFFE ID (SPIFFE-ID.md, "The SPIFFE ID"), a URI SAN such as
//! `spiffe://cluster.local/ns/shop/sa/cart`, matched exactly, or every ID under a path when the
//! rule ends in `/*` (`spiffe://cluster.local/ns/shop/*`: any service account of namespace `shop`).

use rustls_pki_types::{CertificateDer, ServerName};
use yasna::{models::ObjectIdentifier, Tag};

/// One trusted identity, as written in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// A DNS name or an IP address among the certificate's SANs.
    Name(ServerName<'static>),
    /// A SPIFFE ID among its URI SANs: this one exactly.
    Spiffe(String),
    /// Every SPIFFE ID that starts with this (the rule without its `*`, so ending in `/`).
    SpiffeUnder(String),
}

impl Identity {
    /// `text` as an identity: a SPIFFE ID if it starts with `spiffe://`, else a DNS name or an
    /// IP address.
    pub fn parse(text: &str) -> Result<Identity, String> {
        if !text.to_ascii_lowercase().starts_with("spiffe://") {
            return ServerName::try_from(text.to_string())
                .map(Identity::Name)
                .map_err(|_| format!("expected a DNS name, an IP address or a SPIFFE ID, got {text:?}"));
        }
        let bad = |why: &str| format!("{text:?} is no SPIFFE ID: {why}");
        let rest = text.strip_prefix("spiffe://").ok_or_else(|| bad("the scheme must be lowercase `spiffe`"))?;
        if rest.ends_with('/') {
            return Err(bad("a path segment is empty (no trailing `/`)"));
        }
        let (domain, path) = rest.split_once('/').map_or((rest, ""), |(d, p)| (d, p));
        let domain_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '_');
        if domain.is_empty() || !domain.chars().all(domain_char) {
            return Err(bad("the trust domain must be lowercase letters, digits, `.`, `-` and `_`"));
        }
        let (path, under) = match path.strip_suffix('*') {
            Some(prefix) if prefix.is_empty() || prefix.ends_with('/') => (prefix.trim_end_matches('/'), true),
            _ => (path, false),
        };
        let segment_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
        let segment_ok = |s: &str| !s.is_empty() && s != "." && s != ".." && s.chars().all(segment_char);
        if !path.is_empty() && !path.split('/').all(segment_ok) {
            let why = "each path segment must be non-empty letters, digits, `.`, `-` and `_` (a rule may end in `/*`)";
            return Err(bad(why));
        }
        let id = if path.is_empty() { format!("spiffe://{domain}") } else { format!("spiffe://{domain}/{path}") };
        Ok(if under { Identity::SpiffeUnder(format!("{id}/")) } else { Identity::Spiffe(id) })
    }

    /// Whether the end-entity certificate `cert` (already verified) proves this identity.
    pub fn proven_by(&self, cert: &CertificateDer<'_>) -> bool {
        match self {
            Identity::Name(name) => webpki::EndEntityCert::try_from(cert)
                .is_ok_and(|cert| cert.verify_is_valid_for_subject_name(name).is_ok()),
            Identity::Spiffe(id) => uri_sans(cert).iter().any(|uri| uri == id),
            Identity::SpiffeUnder(prefix) => uri_sans(cert).iter().any(|uri| uri.starts_with(prefix.as_str())),
        }
    }
}

/// The subjectAltName extension's OID (RFC 5280 §4.2.1.6).
const SUBJECT_ALT_NAME: [u64; 4] = [2, 5, 29, 17];

/// The URI SANs of `cert` (RFC 5280 §4.1: `Certificate`, its `tbsCertificate`, whose
/// `extensions` are the element tagged [3]); none if it does not parse.
fn uri_sans(cert: &CertificateDer<'_>) -> Vec<String> {
    let extensions = yasna::parse_der(cert, |r| {
        r.read_sequence(|r| {
            let extensions = r.next().read_sequence(|r| {
                let mut extensions = None;
                while let Some(element) = r.read_optional(|r| r.read_tagged_der())? {
                    if element.tag() == Tag::context(3) {
                        extensions = Some(element.value().to_vec());
                    }
                }
                Ok(extensions)
            })?;
            // signatureAlgorithm and signatureValue.
            r.next().read_der()?;
            r.next().read_der()?;
            Ok(extensions)
        })
    });
    let Ok(Some(extensions)) = extensions else { return Vec::new() };
    let san = ObjectIdentifier::from_slice(&SUBJECT_ALT_NAME);
    let names = yasna::parse_der(&extensions, |r| {
        let mut names = None;
        r.read_sequence_of(|r| {
            r.read_sequence(|r| {
                let id = r.next().read_oid()?;
                r.read_optional(|r| r.read_bool())?;
                let value = r.next().read_bytes()?;
                if id == san {
                    names = Some(value);
                }
                Ok(())
            })
        })?;
        Ok(names)
    });
    let Ok(Some(names)) = names else { return Vec::new() };
    // GeneralNames; a uniformResourceIdentifier is [6] IMPLICIT IA5String.
    let uris = yasna::parse_der(&names, |r| {
        let mut uris = Vec::new();
        r.read_sequence_of(|r| {
            let name = r.read_tagged_der()?;
            if name.tag() == Tag::context(6) {
                uris.push(String::from_utf8_lossy(name.value()).into_owned());
            }
            Ok(())
        })?;
        Ok(uris)
    });
    uris.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spiffe_ids_and_rules_parse_and_bad_ones_are_named() {
        let id = |t: &str| Identity::parse(t).unwrap();
        assert_eq!(
            id("spiffe://cluster.local/ns/shop/sa/cart"),
            Identity::Spiffe("spiffe://cluster.local/ns/shop/sa/cart".into())
        );
        assert_eq!(
            id("spiffe://cluster.local/ns/shop/*"),
            Identity::SpiffeUnder("spiffe://cluster.local/ns/shop/".into())
        );
        assert_eq!(id("spiffe://cluster.local/*"), Identity::SpiffeUnder("spiffe://cluster.local/".into()));
        assert!(matches!(id("caller.test"), Identity::Name(_)));
        assert!(matches!(id("10.0.0.7"), Identity::Name(_)));
        for (bad, why) in [
            ("spiffe://", "trust domain"),
            ("spiffe://Cluster.local/x", "trust domain"),
            ("spiffe://td/ns//sa", "path segment"),
            ("spiffe://td/ns/../sa", "path segment"),
            ("spiffe://td/ns/shop*", "path segment"),
            ("spiffe://td/a/*/b", "path segment"),
            ("spiffe://td/a?x=1", "path segment"),
            ("spiffe://td/a/", "path segment"),
            ("SPIFFE://td/a", "lowercase"),
            ("a b", "SPIFFE ID"),
        ] {
            let e = Identity::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
