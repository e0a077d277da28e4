//! What a sandbox's proxy reports, on its way to the client: each decided
//! connection as `network/connection`, and each host no rule names as a
//! `network/decide` request whose answer goes back to the proxy.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::oneshot;

use super::pumps::{EventSender, ProcEvent};
use super::ProcessTable;
use crate::protocol::{
    encode_notification, ErrorObject, NetworkConnection, NetworkConnectionParams, NetworkDecide,
    NetworkDecideParams, NetworkDecision, RequestId,
};
use crate::proxy::{Report, Reporter};
use crate::transport::Line;

/// The connection's side of the questions.
#[derive(Default)]
pub(super) struct Decisions {
    /// The client said `networkDecisions: true`.
    takes: bool,
    /// Questions sent and not answered, by request id.
    waiting: HashMap<RequestId, oneshot::Sender<bool>>,
    next: u64,
}

/// What a process's proxy reports with: its events, to this table.
pub(super) fn reporter(events: &EventSender, serial: u64) -> Reporter {
    let events = events.clone();
    Arc::new(move |report| {
        let events = events.clone();
        Box::pin(async move {
            events.send(ProcEvent::Network { serial, report }).await;
        })
    })
}

impl ProcessTable {
    /// Whether the client answers `network/decide` (its `initialize` says).
    pub(crate) fn take_network_decisions(&mut self, takes: bool) {
        self.decisions.takes = takes;
    }

    /// A start whose policy asks needs a client that answers.
    pub(super) fn check_asking(&self, asks: bool) -> Result<(), ErrorObject> {
        if asks && !self.decisions.takes {
            return Err(ErrorObject::invalid_params(
                "sandbox network ask needs a client that answers network/decide: say networkDecisions: true in initialize",
            ));
        }
        Ok(())
    }

    /// A report of process `id`'s proxy.
    pub(super) fn on_network(&mut self, id: String, report: Report, out: &mut Vec<Line>) {
        match report {
            Report::Connection { host, port, allowed, reason } => {
                let params =
                    NetworkConnectionParams { process_id: id, host, port, allowed, reason };
                out.push(encode_notification::<NetworkConnection>(&params, 160).into());
            }
            Report::Decide { host, port, answer } => {
                // A detached session has nobody to ask: dropped, the answer is no.
                if !self.decisions.takes || self.holding {
                    return;
                }
                let decisions = &mut self.decisions;
                decisions.waiting.retain(|_, waiting| !waiting.is_closed());
                decisions.next += 1;
                let request = RequestId::from(format!("network-decide-{}", decisions.next));
                let params = NetworkDecideParams { process_id: id, host, port };
                let line = serde_json::json!({
                    "id": &request,
                    "method": NetworkDecide::NAME,
                    "params": params,
                });
                decisions.waiting.insert(request, answer);
                out.push(line.to_string().into());
            }
        }
    }

    /// A response from the client: the answer to a `network/decide` (false
    /// when it answers no question of ours). An error or a malformed result denies.
    pub(crate) fn answer_decision(
        &mut self,
        id: &RequestId,
        result: Result<Value, ErrorObject>,
    ) -> bool {
        let Some(waiting) = self.decisions.waiting.remove(id) else { return false };
        let allow = match result.map(serde_json::from_value::<NetworkDecision>) {
            Ok(Ok(decision)) => decision.allow,
            Ok(Err(error)) => {
                tracing::warn!(%id, %error, "a malformed network decision; denied");
                false
            }
            Err(error) => {
                tracing::warn!(%id, message = %error.message, "the client answered a network decision with an error; denied");
                false
            }
        };
        let _ = waiting.send(allow);
        true
    }
}
