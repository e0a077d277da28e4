//! `process/*` requests, in arrival order, behind any start under way.

use serde_json::Value;
use tokio::time::Instant;

use super::{Ending, Spoken, State, Turn};
use crate::dialect::{outbound, Dialect};
use crate::process::{Begun, ProcessTable, ReadOutcome};
use crate::protocol::{
    codes, Empty, ErrorObject, Method, ProcessList, ProcessRead, ProcessResize, ProcessSignal,
    ProcessStart, ProcessTerminate, ProcessWrite, Request, RequestId, SessionEnd,
};
use crate::server::reply::{call, decode, error_reply, reply};
use crate::transport::Line;

impl State {
    /// A process request whose turn has come.
    pub(super) fn on_process_request(
        &mut self,
        id: RequestId,
        method: String,
        params: Value,
        spoken: Spoken,
        out: &mut Vec<Line>,
    ) -> Turn {
        let dialect = spoken.0;
        let roots = &self.roots;
        let table = &mut self.table;
        // A write's refusal is a status for a client of today's dialect.
        let write_dialect = if self.today { Dialect::Today } else { dialect };
        let line = match method.as_str() {
            ProcessStart::NAME => {
                let raw = params.clone();
                let started = decode::<ProcessStart>(params).and_then(|p| {
                    ProcessTable::check_cwd(&p.cwd)?;
                    let shape = outbound::start_shape(spoken.0, spoken.1);
                    table.begin_start(id.clone(), p, shape, roots.clone())
                });
                match started {
                    Ok(Begun::Spawning) => return Turn::Done(None),
                    Ok(Begun::MustWait) => {
                        return Turn::Wait(Request { id, method, params: raw });
                    }
                    Err(error) => error_reply(&id, error),
                }
            }
            ProcessRead::NAME => {
                let outcome = decode::<ProcessRead>(params)
                    .and_then(|p| table.read(id.clone(), p, Instant::now()));
                match outcome {
                    Ok(ReadOutcome::Parked) => return Turn::Done(None),
                    Ok(ReadOutcome::Ready(line)) => {
                        out.push(line);
                        return Turn::Done(None);
                    }
                    Err(error) => reply::<ProcessRead>(&id, Err(error)),
                }
            }
            ProcessWrite::NAME => call::<ProcessWrite>(&id, params, |p| {
                table.write(p).or_else(|(status, error)| {
                    status.and_then(|s| outbound::write_refusal(write_dialect, s)).ok_or(error)
                })
            }),
            ProcessTerminate::NAME => call::<ProcessTerminate>(&id, params, |p| {
                if p.process_id.len() > crate::process::MAX_PROCESS_ID_BYTES {
                    return Err(crate::process::too_long_id(&p.process_id));
                }
                Ok(table.terminate(p, Instant::now()))
            }),
            ProcessSignal::NAME => call::<ProcessSignal>(&id, params, |p| table.signal(p)),
            ProcessResize::NAME => {
                call::<ProcessResize>(&id, params, |p| table.resize(p).map(|()| Empty {}))
            }
            ProcessList::NAME => call::<ProcessList>(&id, params, |_| Ok(table.list())),
            SessionEnd::NAME => {
                let ending = &mut self.ending;
                call::<SessionEnd>(&id, params, |_| {
                    table.end_session();
                    *ending = Ending::Ended;
                    Ok(Empty {})
                })
            }
            other => {
                let error = ErrorObject::new(
                    codes::METHOD_NOT_FOUND,
                    format!("method {other} is listed but not dispatched"),
                );
                error_reply(&id, error)
            }
        };
        Turn::Done(Some(line))
    }
}
