//! SASL/OAUTHBEARER on arbitrary bytes: the bytes as the client's first message through the
//! server exchange (signed and unsecured validators, then the `\x01` answer), as a compact JWS
//! through both validators, and as a JSON Web Key Set. Nothing may panic, and no input may
//! authenticate against the signed validator: its one key is made at start-up and its private
//! half is dropped, so no input can carry a signature it verifies.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use shoal_core::sasl::oauthbearer::{
    base64url, Expectations, Jwks, OAuthBearerServer, Outcome, UnsecuredOptions, Validator,
    CONTROL_A,
};

/// 2027-01-15, inside the lifetime of the seeds' tokens.
const NOW_MS: i64 = 1_800_000_000_000;

fn signed() -> &'static Validator {
    static V: OnceLock<Validator> = OnceLock::new();
    V.get_or_init(|| {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("a P-256 key");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("the key just made");
        let point = key.public_key().as_ref();
        let jwks = format!(
            r#"{{"keys":[{{"kty":"EC","crv":"P-256","kid":"k1","x":"{}","y":"{}"}}]}}"#,
            base64url(&point[1..33]),
            base64url(&point[33..])
        );
        Validator::Signed {
            jwks: Jwks::parse(jwks.as_bytes()).expect("the key set just made"),
            expect: Expectations::default(),
        }
    })
}

fn unsecured() -> &'static Validator {
    static V: OnceLock<Validator> = OnceLock::new();
    V.get_or_init(|| Validator::Unsecured(UnsecuredOptions::default()))
}

fuzz_target!(|data: &[u8]| {
    let mut server = OAuthBearerServer::new();
    if let Ok(Outcome::Done(_)) = server.evaluate(data, signed(), NOW_MS) {
        panic!("authenticated without the key's signature");
    }
    let _ = server.evaluate(&[CONTROL_A], signed(), NOW_MS);
    let mut server = OAuthBearerServer::new();
    let _ = server.evaluate(data, unsecured(), NOW_MS);
    let _ = server.evaluate(&[CONTROL_A], unsecured(), NOW_MS);
    if let Ok(token) = std::str::from_utf8(data) {
        assert!(
            signed().validate(token, NOW_MS).is_err(),
            "a token verified without the key"
        );
        let _ = unsecured().validate(token, NOW_MS);
    }
    let _ = Jwks::parse(data);
});
