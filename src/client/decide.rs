//! The client's answers to `network/decide`: a sandbox's proxy asks about a
//! host no rule of its policy names, and the callback in
//! [`ClientOptions::network_decider`](super::ClientOptions) says yes or no.

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use crate::protocol::{
    encode_response, ErrorObject, NetworkDecide, NetworkDecideParams, NetworkDecision, Request,
};

/// Decides whether a sandboxed process may reach a host: `true` allows it
/// (for the rest of that process's life), `false` refuses. Given as
/// `ClientOptions::network_decider`; the client then says
/// `networkDecisions: true` in `initialize`.
#[derive(Clone)]
pub struct NetworkDecider(
    Arc<dyn Fn(NetworkDecideParams) -> BoxFuture<'static, bool> + Send + Sync>,
);

impl NetworkDecider {
    /// A decider from an async callback.
    pub fn new<F, Fut>(decide: F) -> NetworkDecider
    where
        F: Fn(NetworkDecideParams) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = bool> + Send + 'static,
    {
        NetworkDecider(Arc::new(move |params| Box::pin(decide(params))))
    }
}

impl fmt::Debug for NetworkDecider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NetworkDecider")
    }
}

/// The decider, where its answers go, and the answers under way (aborted
/// when the client closes: this is dropped then).
pub(super) struct Answering {
    pub(super) decider: NetworkDecider,
    pub(super) outgoing: mpsc::Sender<String>,
    pub(super) answering: tokio::task::JoinSet<()>,
}

impl Answering {
    /// Answers `request` on a task of its own (the callback may take its
    /// time; the server denies when its own timeout passes first).
    pub(super) fn answer(&mut self, request: Request) {
        while self.answering.try_join_next().is_some() {}
        let (decider, outgoing) = (self.decider.clone(), self.outgoing.clone());
        self.answering.spawn(async move {
            let result = match serde_json::from_value::<NetworkDecideParams>(request.params) {
                Ok(params) => Ok(NetworkDecision { allow: (decider.0)(params).await }),
                Err(error) => Err(ErrorObject::invalid_params(format!(
                    "invalid params for {}: {error}",
                    NetworkDecide::NAME
                ))),
            };
            let _ = outgoing.send(encode_response(&request.id, &result)).await;
        });
    }
}
