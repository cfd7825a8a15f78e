//! SASL PLAIN (RFC 4616): one message, `authzid NUL authcid NUL passwd`, checked against the
//! users a listener's JAAS configuration lists (`user_NAME="password"`), as Kafka's
//! `PlainServerCallbackHandler` does. Sans-IO.

use subtle::ConstantTimeEq;

/// Longest PLAIN message accepted (user name and password together).
pub const MESSAGE_BYTES_MAX: usize = 4096;

/// Why a PLAIN message was refused; SASL_AUTHENTICATION_FAILED on the wire either way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlainError {
    #[error("malformed PLAIN message: {0}")]
    Malformed(&'static str),
    #[error("the authorization id differs from the user name")]
    AuthzidMismatch,
    #[error("invalid user name or password")]
    InvalidCredentials,
}

/// Checks one PLAIN message; returns the authenticated user name. `password_of` gives a
/// user's configured password.
///
/// # Errors
/// [`PlainError`]: not three NUL-separated fields, an empty user name or password, an
/// authorization id other than the user name, or wrong credentials.
pub fn authenticate<'p>(
    message: &[u8],
    password_of: impl FnOnce(&str) -> Option<&'p str>,
) -> Result<String, PlainError> {
    if message.len() > MESSAGE_BYTES_MAX {
        return Err(PlainError::Malformed("message too long"));
    }
    let text = std::str::from_utf8(message).map_err(|_| PlainError::Malformed("not UTF-8"))?;
    let mut fields = text.split('\0');
    let (Some(authzid), Some(user), Some(password), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(PlainError::Malformed(
            "expected authzid NUL user NUL password",
        ));
    };
    if user.is_empty() {
        return Err(PlainError::Malformed("empty user name"));
    }
    if password.is_empty() {
        return Err(PlainError::Malformed("empty password"));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(PlainError::AuthzidMismatch);
    }
    let expected = password_of(user).ok_or(PlainError::InvalidCredentials)?;
    if bool::from(expected.as_bytes().ct_eq(password.as_bytes())) {
        Ok(user.to_string())
    } else {
        Err(PlainError::InvalidCredentials)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(name: &str) -> Option<&'static str> {
        (name == "alice").then_some("alice-secret")
    }

    #[test]
    fn the_configured_password_authenticates() {
        assert_eq!(
            authenticate(b"\0alice\0alice-secret", users),
            Ok("alice".into())
        );
        assert_eq!(
            authenticate(b"alice\0alice\0alice-secret", users),
            Ok("alice".into())
        );
    }

    #[test]
    fn everything_else_is_refused() {
        let cases: &[(&[u8], PlainError)] = &[
            (b"\0alice\0wrong", PlainError::InvalidCredentials),
            (b"\0bob\0alice-secret", PlainError::InvalidCredentials),
            (b"bob\0alice\0alice-secret", PlainError::AuthzidMismatch),
            (b"\0\0pw", PlainError::Malformed("empty user name")),
            (b"\0alice\0", PlainError::Malformed("empty password")),
            (
                b"alice-secret",
                PlainError::Malformed("expected authzid NUL user NUL password"),
            ),
            (
                b"\0a\0b\0c",
                PlainError::Malformed("expected authzid NUL user NUL password"),
            ),
            (b"\0alice\0\xff", PlainError::Malformed("not UTF-8")),
        ];
        for (message, expected) in cases {
            assert_eq!(authenticate(message, users).as_ref(), Err(expected));
        }
    }
}
