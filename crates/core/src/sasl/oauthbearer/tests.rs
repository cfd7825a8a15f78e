//! Tokens are made here with keys generated at test time: EC keys by `ring`, the RSA key by
//! the `openssl` command (ring cannot generate RSA keys), signed with `ring`.

use std::process::Command;
use std::sync::OnceLock;

use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING, RSA_PKCS1_SHA256,
};
use serde_json::json;

use super::*;

const NOW_MS: i64 = 1_800_000_000_000;
const NOW_S: i64 = NOW_MS / 1000;

struct EcKey(EcdsaKeyPair);
struct RsaKey(RsaKeyPair);

fn ec_key() -> EcKey {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    EcKey(EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap())
}

impl EcKey {
    fn jwk(&self, kid: &str) -> Value {
        let point = self.0.public_key().as_ref();
        json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
               "x": base64url(&point[1..33]), "y": base64url(&point[33..])})
    }

    fn sign(&self, input: &[u8]) -> Vec<u8> {
        self.0
            .sign(&SystemRandom::new(), input)
            .unwrap()
            .as_ref()
            .to_vec()
    }
}

fn rsa_key() -> &'static RsaKey {
    static KEY: OnceLock<RsaKey> = OnceLock::new();
    KEY.get_or_init(|| {
        let out = Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ])
            .args(["-outform", "DER"])
            .output()
            .expect("the openssl command makes the test's RSA key");
        assert!(out.status.success(), "openssl genpkey failed");
        // OpenSSL 3.0 writes PKCS#1 here, later versions PKCS#8.
        let key = RsaKeyPair::from_der(&out.stdout)
            .or_else(|_| RsaKeyPair::from_pkcs8(&out.stdout))
            .unwrap();
        RsaKey(key)
    })
}

impl RsaKey {
    fn jwk(&self, kid: &str) -> Value {
        let public = RsaPublicKeyComponents::<Vec<u8>>::from(self.0.public());
        json!({"kty": "RSA", "kid": kid, "alg": "RS256",
               "n": base64url(&public.n), "e": base64url(&public.e)})
    }

    fn sign(&self, input: &[u8]) -> Vec<u8> {
        let mut sig = vec![0; self.0.public().modulus_len()];
        self.0
            .sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), input, &mut sig)
            .unwrap();
        sig
    }
}

fn jwt(header: &Value, claims: &Value, sign: impl FnOnce(&[u8]) -> Vec<u8>) -> String {
    let input = format!(
        "{}.{}",
        base64url(header.to_string().as_bytes()),
        base64url(claims.to_string().as_bytes())
    );
    let sig = sign(input.as_bytes());
    format!("{input}.{}", base64url(&sig))
}

fn claims() -> Value {
    json!({"sub": "alice", "iss": "https://issuer.test", "aud": ["kafka", "other"],
           "iat": NOW_S - 10, "exp": NOW_S + 600, "scope": "produce consume"})
}

fn expectations() -> Expectations {
    Expectations {
        audience: vec!["kafka".into()],
        issuer: Some("https://issuer.test".into()),
        ..Expectations::default()
    }
}

struct Fixture {
    ec: EcKey,
    validator: Validator,
}

fn fixture() -> Fixture {
    let ec = ec_key();
    let set = json!({"keys": [ec.jwk("ec-1"), rsa_key().jwk("rsa-1"),
                              {"kty": "oct", "k": "c2VjcmV0"}]});
    let jwks = Jwks::parse(set.to_string().as_bytes()).unwrap();
    assert_eq!(jwks.len(), 2, "the oct key is left out");
    Fixture {
        ec,
        validator: Validator::Signed {
            jwks,
            expect: expectations(),
        },
    }
}

impl Fixture {
    fn es256(&self, claims: &Value) -> String {
        jwt(
            &json!({"alg": "ES256", "kid": "ec-1", "typ": "JWT"}),
            claims,
            |m| self.ec.sign(m),
        )
    }
}

fn rs256(kid: &str, claims: &Value) -> String {
    jwt(&json!({"alg": "RS256", "kid": kid}), claims, |m| {
        rsa_key().sign(m)
    })
}

#[test]
fn a_good_token_authenticates_its_subject() {
    let f = fixture();
    for token in [f.es256(&claims()), rs256("rsa-1", &claims())] {
        let valid = f.validator.validate(&token, NOW_MS).unwrap();
        assert_eq!(valid.principal, "alice");
        assert_eq!(valid.expires_at_ms, (NOW_S + 600) * 1000);
        assert_eq!(valid.scopes, vec!["produce consume".to_string()]);
    }
    // No kid: every key of the right type is tried.
    let token = jwt(&json!({"alg": "RS256"}), &claims(), |m| rsa_key().sign(m));
    assert!(f.validator.validate(&token, NOW_MS).is_ok());
}

#[test]
fn a_wrong_signature_or_an_unknown_key_is_refused() {
    let f = fixture();
    let other = ec_key();
    let forged = jwt(&json!({"alg": "ES256", "kid": "ec-1"}), &claims(), |m| {
        other.sign(m)
    });
    assert_eq!(
        f.validator.validate(&forged, NOW_MS),
        Err(OAuthError::BadSignature)
    );
    // The claims changed after signing.
    let good = f.es256(&claims());
    let mut parts: Vec<&str> = good.split('.').collect();
    let mut changed = claims();
    changed["sub"] = json!("admin");
    let payload = base64url(changed.to_string().as_bytes());
    parts[1] = &payload;
    assert_eq!(
        f.validator.validate(&parts.join("."), NOW_MS),
        Err(OAuthError::BadSignature)
    );
    let unknown = jwt(&json!({"alg": "ES256", "kid": "nope"}), &claims(), |m| {
        f.ec.sign(m)
    });
    assert_eq!(
        f.validator.validate(&unknown, NOW_MS),
        Err(OAuthError::UnknownKey(Some("nope".into())))
    );
    // An RSA kid with an EC algorithm: no key fits.
    let mismatched = jwt(&json!({"alg": "ES256", "kid": "rsa-1"}), &claims(), |m| {
        f.ec.sign(m)
    });
    assert!(matches!(
        f.validator.validate(&mismatched, NOW_MS),
        Err(OAuthError::UnknownKey(_))
    ));
}

#[test]
fn alg_none_and_unserved_algorithms_are_refused_by_the_signed_validator() {
    let f = fixture();
    let none = format!(
        "{}.{}.",
        base64url(br#"{"alg":"none"}"#),
        base64url(claims().to_string().as_bytes())
    );
    assert_eq!(
        f.validator.validate(&none, NOW_MS),
        Err(OAuthError::Algorithm("none".into()))
    );
    let hs = jwt(&json!({"alg": "HS256"}), &claims(), |_| vec![1; 32]);
    assert_eq!(
        f.validator.validate(&hs, NOW_MS),
        Err(OAuthError::Algorithm("HS256".into()))
    );
    let no_alg = jwt(&json!({"kid": "ec-1"}), &claims(), |m| f.ec.sign(m));
    assert!(matches!(
        f.validator.validate(&no_alg, NOW_MS),
        Err(OAuthError::MalformedToken(_))
    ));
}

#[test]
fn times_are_checked_with_the_skew() {
    let f = fixture();
    let with = |k: &str, v: Value| {
        let mut c = claims();
        c[k] = v;
        f.es256(&c)
    };
    let check = |token: &str| f.validator.validate(token, NOW_MS);
    // exp: within the 30 s skew still valid, at the skew's end expired.
    assert!(check(&with("exp", json!(NOW_S - 29))).is_ok());
    assert!(matches!(
        check(&with("exp", json!(NOW_S - 30))),
        Err(OAuthError::Expired { .. })
    ));
    assert!(matches!(
        check(&with("nbf", json!(NOW_S + 31))),
        Err(OAuthError::NotYetValid { .. })
    ));
    assert!(check(&with("nbf", json!(NOW_S + 30))).is_ok());
    assert!(matches!(
        check(&with("iat", json!(NOW_S + 31))),
        Err(OAuthError::IssuedInFuture { .. })
    ));
    let mut no_exp = claims();
    no_exp.as_object_mut().unwrap().remove("exp");
    assert_eq!(
        check(&f.es256(&no_exp)),
        Err(OAuthError::MissingClaim("exp".into()))
    );
    let mut no_iat = claims();
    no_iat.as_object_mut().unwrap().remove("iat");
    assert_eq!(
        check(&f.es256(&no_iat)),
        Err(OAuthError::MissingClaim("iat".into()))
    );
    assert_eq!(
        check(&with("exp", json!("soon"))),
        Err(OAuthError::BadClaim("exp".into()))
    );
    // Fractions are truncated, as jose4j does.
    assert!(check(&with("exp", json!(NOW_S as f64 + 600.5))).is_ok());
}

#[test]
fn audience_issuer_and_subject_are_checked() {
    let f = fixture();
    let with = |k: &str, v: Value| {
        let mut c = claims();
        c[k] = v;
        f.es256(&c)
    };
    let check = |token: &str| f.validator.validate(token, NOW_MS);
    assert_eq!(
        check(&with("aud", json!("elsewhere"))),
        Err(OAuthError::Audience)
    );
    assert!(check(&with("aud", json!("kafka"))).is_ok());
    assert_eq!(
        check(&with("iss", json!("https://evil.test"))),
        Err(OAuthError::Issuer)
    );
    assert_eq!(
        check(&with("sub", json!("  "))),
        Err(OAuthError::BadClaim("sub".into()))
    );
    assert_eq!(
        check(&with("sub", json!(42))),
        Err(OAuthError::BadClaim("sub".into()))
    );
    let mut no_aud = claims();
    no_aud.as_object_mut().unwrap().remove("aud");
    assert_eq!(
        check(&f.es256(&no_aud)),
        Err(OAuthError::MissingClaim("aud".into()))
    );
    // Without an expected audience, jose4j (so Kafka) refuses a token that names one.
    let lenient = Validator::Signed {
        jwks: match &f.validator {
            Validator::Signed { jwks, .. } => jwks.clone(),
            Validator::Unsecured(_) => unreachable!(),
        },
        expect: Expectations {
            sub_claim: "client_id".into(),
            ..Expectations::default()
        },
    };
    assert_eq!(
        lenient.validate(&f.es256(&claims()), NOW_MS),
        Err(OAuthError::Audience)
    );
    let mut c = no_aud.clone();
    c["client_id"] = json!("svc-7");
    assert_eq!(
        lenient.validate(&f.es256(&c), NOW_MS).unwrap().principal,
        "svc-7"
    );
}

#[test]
fn malformed_tokens_are_errors() {
    let f = fixture();
    let header = base64url(br#"{"alg":"ES256"}"#);
    let body = base64url(claims().to_string().as_bytes());
    let long = "a".repeat(MESSAGE_BYTES_MAX + 1);
    let cases = [
        String::new(),
        "abc".into(),
        "a.b".into(),
        "a.b.c.d".into(),
        format!("{header}.{body}.!!!"),
        format!("%%.{body}.AAAA"),
        format!("{}.{body}.AAAA", base64url(b"[1,2]")),
        format!("{header}.{}.AAAA", base64url(b"not json")),
        format!("{header}.{}.AAAA", base64url(&[0xff, 0xfe])),
        long,
    ];
    for token in cases {
        assert!(
            matches!(
                f.validator.validate(&token, NOW_MS),
                Err(OAuthError::MalformedToken(_))
            ),
            "{token:.40}"
        );
    }
    // Deeply nested JSON hits serde_json's recursion limit, not the stack.
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let token = format!("{header}.{}.AAAA", base64url(deep.as_bytes()));
    assert!(f.validator.validate(&token, NOW_MS).is_err());
}

#[test]
fn bad_key_sets_are_errors() {
    for bad in [
        &b"not json"[..],
        br#"{"nokeys": []}"#,
        br#"{"keys": []}"#,
        br#"{"keys": [{"kty": "oct", "k": "AA"}]}"#,
        br#"{"keys": [{"kty": "RSA", "n": "AQAB"}]}"#,
        br#"{"keys": [{"kty": "RSA", "n": "AQAB", "e": "AQAB"}]}"#,
        br#"{"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}]}"#,
        br#"{"keys": [7]}"#,
    ] {
        assert!(
            Jwks::parse(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    assert!(Jwks::parse(&vec![b' '; JWKS_BYTES_MAX + 1]).is_err());
}

#[test]
fn the_client_message_parses_as_kafkas_does() {
    let first = ClientFirst::parse(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01").unwrap();
    assert_eq!(first.token, "abc.def.ghi");
    assert_eq!(first.authzid, "");
    let first = ClientFirst::parse(
        b"n,a=al=2Cice,\x01auth=bearer t0k-_~+/.en==\x01traceId=x y\x01logicalCluster=lc\x01\x01",
    )
    .unwrap();
    assert_eq!(first.authzid, "al,ice");
    assert_eq!(first.token, "t0k-_~+/.en==");
    assert_eq!(
        first.extensions,
        vec![
            ("traceId".to_string(), "x y".to_string()),
            ("logicalCluster".to_string(), "lc".to_string())
        ]
    );
    assert_eq!(ClientFirst::parse(&first.to_bytes()), Ok(first.clone()));
    assert!(
        !format!("{first:?}").contains("t0k"),
        "Debug hides the token"
    );
    for bad in [
        &b""[..],
        b"y,,\x01auth=Bearer t\x01\x01",
        b"n,,\x01\x01",
        b"n,,\x01auth=Bearer t\x01",
        b"n,,auth=Bearer t\x01\x01",
        b"n,,\x01auth=Basic t\x01\x01",
        b"n,,\x01auth=Bearer\x01\x01",
        b"n,,\x01auth=Bearer t!\x01\x01",
        b"n,,\x01auth=Bearer t\x01k1=v\x01\x01",
        b"n,,\x01auth=Bearer t\x01k=\x01\x01",
        b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01",
        b"n,a=x=41,\x01auth=Bearer t\x01\x01",
        b"n,,\x01auth=Bearer t\xff\x01\x01",
    ] {
        assert!(
            ClientFirst::parse(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let mut huge = b"n,,\x01auth=Bearer ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', MESSAGE_BYTES_MAX));
    huge.extend_from_slice(b"\x01\x01");
    assert_eq!(
        ClientFirst::parse(&huge),
        Err(OAuthError::Malformed("message too long"))
    );
    let many: String = (0..=EXTENSIONS_MAX)
        .map(|i| format!("k{}=v\x01", "x".repeat(i + 1)).replace('k', "a"))
        .collect();
    let message = format!("n,,\x01auth=Bearer t\x01{many}\x01");
    assert_eq!(
        ClientFirst::parse(message.as_bytes()),
        Err(OAuthError::Malformed("too many extensions"))
    );
}

#[test]
fn the_server_answers_an_invalid_token_with_a_challenge_then_fails() {
    let f = fixture();
    let mut server = OAuthBearerServer::new();
    let expired = {
        let mut c = claims();
        c["exp"] = json!(NOW_S - 100);
        f.es256(&c)
    };
    let message = ClientFirst {
        token: expired,
        authzid: String::new(),
        extensions: Vec::new(),
    }
    .to_bytes();
    let Ok(Outcome::Challenge(challenge, OAuthError::Expired { .. })) =
        server.evaluate(&message, &f.validator, NOW_MS)
    else {
        panic!("an expired token is an error challenge");
    };
    assert_eq!(challenge, r#"{"status":"invalid_token"}"#);
    assert_eq!(
        server.evaluate(&[CONTROL_A], &f.validator, NOW_MS),
        Err(Failure::Acknowledged(challenge))
    );
    assert!(server.evaluate(&message, &f.validator, NOW_MS).is_err());

    let good = ClientFirst {
        token: f.es256(&claims()),
        authzid: String::new(),
        extensions: vec![("traceId".into(), "1".into())],
    };
    let mut server = OAuthBearerServer::new();
    let Ok(Outcome::Done(token)) = server.evaluate(&good.to_bytes(), &f.validator, NOW_MS) else {
        panic!("a good token authenticates");
    };
    assert_eq!(token.principal, "alice");
    let as_bob = ClientFirst {
        authzid: "bob".into(),
        ..good
    };
    assert!(matches!(
        OAuthBearerServer::new().evaluate(&as_bob.to_bytes(), &f.validator, NOW_MS),
        Err(Failure::Refused(OAuthError::AuthzidMismatch { .. }))
    ));
    // \x01 without a challenge before it is a malformed first message.
    assert!(matches!(
        OAuthBearerServer::new().evaluate(&[CONTROL_A], &f.validator, NOW_MS),
        Err(Failure::Refused(OAuthError::Malformed(_)))
    ));
}

#[test]
fn session_lifetime_is_the_tokens_remaining_life_capped_by_max_reauth() {
    let token = ValidToken {
        principal: "a".into(),
        expires_at_ms: NOW_MS + 60_000,
        scopes: Vec::new(),
    };
    assert_eq!(token.session_lifetime_ms(NOW_MS, None), 60_000);
    assert_eq!(token.session_lifetime_ms(NOW_MS, Some(0)), 60_000);
    assert_eq!(token.session_lifetime_ms(NOW_MS, Some(5_000)), 5_000);
    assert_eq!(token.session_lifetime_ms(NOW_MS, Some(90_000)), 60_000);
    assert_eq!(token.session_lifetime_ms(NOW_MS + 70_000, None), 0);
}

#[test]
fn unsecured_tokens_pass_only_the_unsecured_validator() {
    let unsigned = |claims: &Value| {
        format!(
            "{}.{}.",
            base64url(br#"{"alg":"none"}"#),
            base64url(claims.to_string().as_bytes())
        )
    };
    let unsecured = Validator::Unsecured(UnsecuredOptions {
        required_scope: vec!["produce".into()],
        ..UnsecuredOptions::default()
    });
    let token = unsecured.validate(&unsigned(&claims()), NOW_MS).unwrap();
    assert_eq!(token.principal, "alice");
    assert_eq!(token.scopes, vec!["produce", "consume"]);
    let mut c = claims();
    c["scope"] = json!("consume");
    assert_eq!(
        unsecured.validate(&unsigned(&c), NOW_MS),
        Err(OAuthError::Scope("produce".into()))
    );
    c = claims();
    c["exp"] = json!(NOW_S);
    assert!(matches!(
        unsecured.validate(&unsigned(&c), NOW_MS),
        Err(OAuthError::Expired { .. })
    ));
    c = claims();
    c["exp"] = json!(NOW_S - 20);
    c["iat"] = json!(NOW_S - 10);
    let skewed = Validator::Unsecured(UnsecuredOptions {
        clock_skew_ms: 60_000,
        ..UnsecuredOptions::default()
    });
    assert_eq!(
        skewed.validate(&unsigned(&c), NOW_MS),
        Err(OAuthError::Inconsistent)
    );
    // A signed token is not an unsecured one.
    let f = fixture();
    assert!(matches!(
        unsecured.validate(&f.es256(&claims()), NOW_MS),
        Err(OAuthError::Algorithm(_))
    ));
}
