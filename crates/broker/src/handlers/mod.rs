//! One module per API family. Each handler takes the decoded request and returns the response
//! body; none of them writes to the socket.

pub mod acls;
pub mod api_versions;
pub mod cluster;
pub mod configs;
pub mod features;
pub mod fetch;
pub mod groups;
pub mod init_producer_id;
pub mod list_offsets;
pub mod log_dirs;
pub mod metadata;
pub mod produce;
pub mod producers;
pub mod scram;
pub mod share_admin;
pub mod share_fetch;
pub mod share_groups;
pub mod share_state;
pub mod topics;
pub mod txn;
pub mod txn_share_ack;

use std::net::SocketAddr;
use std::sync::Arc;

use shoal_protocol::messages::TopicName;
use shoal_protocol::StrBytes;

use crate::config::listeners::Listener;
use crate::seams::ownership::Node;

/// What a handler may need to know about the connection a request came on.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub peer: SocketAddr,
    /// The listener the connection came in on.
    pub listener: Arc<Listener>,
    /// Who is asking, as Kafka names principals: `User:ANONYMOUS` on PLAINTEXT, the SASL user
    /// (`User:alice`) or the client certificate's subject (`User:CN=client,O=Example`).
    pub principal: Arc<str>,
}

impl RequestContext {
    /// `node` as this connection's clients must reach it: this node (`local_node_id`) at the
    /// address its listener advertises, as Kafka answers each listener with its own
    /// endpoints; any other node as the ownership seam gives it.
    pub fn endpoint(&self, local_node_id: i32, mut node: Node) -> Node {
        if node.node_id == local_node_id {
            if let Some(advertised) = &self.listener.advertised {
                node.host.clone_from(&advertised.host);
                node.port = advertised.port;
            }
        }
        node
    }
}

pub fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

pub fn topic_name(s: impl Into<String>) -> TopicName {
    TopicName(str_bytes(s))
}

/// The records field for the batches in `region`: a placeholder, with the region to send in its
/// place from the file ([`crate::outbound`]); past the longest placeholder (far beyond any
/// default limit), the bytes themselves, read now.
///
/// # Errors
/// Reading the bytes failed.
pub fn records_field(
    region: shoal_storage::FileRegion,
) -> std::io::Result<(bytes::Bytes, Option<shoal_storage::FileRegion>)> {
    if region.is_empty() {
        return Ok((bytes::Bytes::new(), None));
    }
    match shoal_protocol::splice::placeholder(region.len()) {
        Some(stand_in) => Ok((stand_in, Some(region))),
        None => Ok((region.read()?, None)),
    }
}
