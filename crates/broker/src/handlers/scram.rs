//! AlterUserScramCredentials and DescribeUserScramCredentials: SCRAM credentials as Kafka's
//! controller manages them. Each user may be named once per request (DUPLICATE_RESOURCE
//! otherwise); a valid change becomes a metadata record holding the salt, StoredKey and
//! ServerKey derived from the client's salted password (never the password itself), and all of
//! a request's records are appended together before it is answered.

use std::collections::{BTreeMap, BTreeSet};

use shoal_core::sasl::scram::{ScramCredential, ScramMechanism, ITERATIONS_MAX, ITERATIONS_MIN};
use shoal_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use shoal_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use shoal_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use shoal_protocol::ErrorCode;

use super::str_bytes;
use crate::broker::Broker;
use crate::cluster_metadata::MetaRecord;

type Refusal = (ErrorCode, &'static str);

fn check_user_and_mechanism(user: &str, mechanism: i8) -> Result<ScramMechanism, Refusal> {
    if user.is_empty() {
        return Err((
            ErrorCode::UNACCEPTABLE_CREDENTIAL,
            "Username must not be empty",
        ));
    }
    ScramMechanism::from_code(mechanism).ok_or((
        ErrorCode::UNSUPPORTED_SASL_MECHANISM,
        "Unknown SCRAM mechanism",
    ))
}

/// Validates every deletion and upsertion, appends the records of the valid ones, and answers
/// one result per user named.
pub async fn alter(
    broker: &Broker,
    request: &AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    const TWICE: Refusal = (
        ErrorCode::DUPLICATE_RESOURCE,
        "A user credential cannot be altered twice in the same request",
    );
    let mut changes: BTreeMap<String, MetaRecord> = BTreeMap::new();
    let mut refused: BTreeMap<String, Refusal> = BTreeMap::new();
    let mut decide = |user: &str, outcome: Result<MetaRecord, Refusal>| {
        if refused.contains_key(user) {
            return;
        }
        if changes.remove(user).is_some() {
            refused.insert(user.to_string(), TWICE);
            return;
        }
        match outcome {
            Ok(record) => {
                changes.insert(user.to_string(), record);
            }
            Err(refusal) => {
                refused.insert(user.to_string(), refusal);
            }
        }
    };
    for deletion in &request.deletions {
        let user = deletion.name.as_str();
        let outcome = check_user_and_mechanism(user, deletion.mechanism).and_then(|mechanism| {
            if broker.scram_credential(user, mechanism).is_none() {
                return Err((
                    ErrorCode::RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist",
                ));
            }
            Ok(MetaRecord::RemoveScramCredential {
                user: user.to_string(),
                mechanism,
            })
        });
        decide(user, outcome);
    }
    for upsertion in &request.upsertions {
        let user = upsertion.name.as_str();
        let outcome = check_user_and_mechanism(user, upsertion.mechanism).and_then(|mechanism| {
            if upsertion.iterations < ITERATIONS_MIN {
                return Err((ErrorCode::UNACCEPTABLE_CREDENTIAL, "Too few iterations"));
            }
            if upsertion.iterations > ITERATIONS_MAX {
                return Err((ErrorCode::UNACCEPTABLE_CREDENTIAL, "Too many iterations"));
            }
            Ok(MetaRecord::ScramCredential {
                user: user.to_string(),
                mechanism,
                credential: ScramCredential::from_salted_password(
                    mechanism,
                    &upsertion.salt,
                    &upsertion.salted_password,
                    upsertion.iterations,
                ),
            })
        });
        decide(user, outcome);
    }
    let mut results = Vec::with_capacity(changes.len() + refused.len());
    let users: Vec<String> = changes.keys().cloned().collect();
    let written = broker
        .alter_scram_credentials(changes.into_values().collect())
        .await;
    for user in users {
        let mut result = AlterUserScramCredentialsResult::default().with_user(str_bytes(user));
        if let Err(e) = &written {
            result.error_code = e.code.code();
            result.error_message = Some(str_bytes(e.message.clone()));
        }
        results.push(result);
    }
    for (user, (code, message)) in refused {
        results.push(
            AlterUserScramCredentialsResult::default()
                .with_user(str_bytes(user))
                .with_error_code(code.code())
                .with_error_message(Some(str_bytes(message))),
        );
    }
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// Describes the named users' credentials (mechanism and iterations, nothing secret), or every
/// user's when none is named.
pub fn describe(
    broker: &Broker,
    request: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let all = broker.scram_users();
    let result = |user: &str, credentials: &[(ScramMechanism, i32)]| {
        DescribeUserScramCredentialsResult::default()
            .with_user(str_bytes(user))
            .with_credential_infos(
                credentials
                    .iter()
                    .map(|(m, iterations)| {
                        CredentialInfo::default()
                            .with_mechanism(m.code())
                            .with_iterations(*iterations)
                    })
                    .collect(),
            )
    };
    let refused = |user: &str, code: ErrorCode, message: String| {
        DescribeUserScramCredentialsResult::default()
            .with_user(str_bytes(user))
            .with_error_code(code.code())
            .with_error_message(Some(str_bytes(message)))
    };
    let named = request.users.as_ref().filter(|users| !users.is_empty());
    let results = match named {
        None => all.iter().map(|(user, c)| result(user, c)).collect(),
        Some(users) => {
            let mut seen = BTreeSet::new();
            let twice: BTreeSet<&str> = users
                .iter()
                .map(|u| u.name.as_str())
                .filter(|u| !seen.insert(*u))
                .collect();
            let mut answered = BTreeSet::new();
            users
                .iter()
                .map(|u| u.name.as_str())
                .filter(|u| answered.insert(*u))
                .map(|user| {
                    if twice.contains(user) {
                        refused(
                            user,
                            ErrorCode::DUPLICATE_RESOURCE,
                            format!(
                                "Cannot describe SCRAM credentials for the same user twice \
                                 in a single request: {user}"
                            ),
                        )
                    } else if let Some(credentials) = all.get(user) {
                        result(user, credentials)
                    } else {
                        refused(
                            user,
                            ErrorCode::RESOURCE_NOT_FOUND,
                            format!(
                                "Attempt to describe a user credential that does not exist: \
                                 {user}"
                            ),
                        )
                    }
                })
                .collect()
        }
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}
