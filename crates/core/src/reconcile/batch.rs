//! One exec per pod: a pod's whole statement list sent as one `--multiquery` script.
//!
//! An exec costs far more than most DDL statements: on a real cluster the API server, the kubelet
//! and the container runtime set each one up (commonly 100 to 300 ms), then clickhouse-client
//! starts (about 60 ms), and an API server rate-limits them. One exec per statement made a list of
//! 20 statements on 8 pods cost 160 execs. Here a pod's list is one script, and the error of a
//! statement that fails still names it:
//!
//! - Before statement `i` the script runs `SELECT '<nonce>:<i>'`, and after the last one
//!   `SELECT '<nonce>:end'`. Both clients print each query's result as it ends (measured on 18.16:
//!   a line per query, flushed), in order, and stop at the first statement that fails
//!   (`--multiquery` without `--ignore-error`), with that statement's error on stderr and its code
//!   as the exit status, as a single statement's client does. So the statement that failed is the
//!   one after the last marker printed, and a run whose output lacks the end marker did not finish,
//!   whatever its exit status.
//! - The nonce is new for every script and is not in its argv: no statement's output (a SELECT, a
//!   status table of `ON CLUSTER`) can print a line that reads as a marker, so nothing a statement
//!   prints moves the attribution. Markers are only read in order (`<nonce>:0`, then `:1`, ...).
//! - Each statement's own output is what is printed between its marker and the next one: the
//!   status table of a distributed DDL statement is read from there as it was from its own exec.
//! - A statement's trailing `;` (validation allows one) is left as it is; one without gets a `;` on
//!   a line of its own, so a trailing line comment cannot swallow it.
//! - A list runs one exec per statement (see `Run::apply_all_in`, and [`batchable`]) when one of
//!   its statements:
//!   - is an `INSERT` whose data follows it in the text (`VALUES`, `FORMAT`): 18.16's client ends
//!     such data at the first newline in a multi-statement input (it reads a whole input as the
//!     data otherwise), so a multi-line `VALUES` list would be cut;
//!   - is only a comment (an empty query to the client);
//!   - changes the session (`USE`, `SET`, a transaction, a `TEMPORARY` table): each statement had
//!     a client of its own, so `USE shop` changed nothing for the next one, and in one script it
//!     would move every later statement to another database;
//!   - can be split otherwise by a client than by this crate's lexer: a comment or string left
//!     open, a block comment inside another (18.16 ends the outer one at the first `*/`, so a
//!     `;` after it would separate a statement hidden in the comment, which 18.16 refused in an
//!     exec of its own), a `#` or `//` comment or a heredoc (18.16 has neither);
//!   - runs `ON CLUSTER`: under `distributed_ddl_output_mode` `never_throw` or
//!     `null_status_on_timeout` (set by the settings or by a server profile) a host's failure is
//!     only in the statement's status table, read after its exec, and a script would have sent
//!     the next statements to the whole cluster by then; the tables of a large cluster also count
//!     towards the output's 1 MiB cap.
//! - The live-schema check runs in the same exec (`command::render_batch`): a second client,
//!   started by the pod's shell only once the statements' client exited 0, runs the check's script
//!   (the rest of the input) as an exec of its own would (`--ignore-error`), and the shell prints
//!   `STATEMENTS_ENDED_LABEL` between them. So what follows the end marker is the label, then the
//!   check's output; the exit status is the check's, and the label (not the status) says that the
//!   statements' client ended well. A check whose output cannot be read there (cut by the cap, its
//!   client ended early) runs again in an exec of its own, on a new scratch database
//!   (`live_schema::run`): what it finds decides, as before.
//! - The ledger's rows (`ledger` prop) are written by the statements' client: the opening row's
//!   script before the first marker, so that a client failing before that marker failed at the
//!   row (and ran no statement), and the closing row's script after the end marker, followed by
//!   `SELECT '<nonce>:closed'`, when no check after the statements can fail the pod and no
//!   lease is set (see `Run::apply_all_in`); otherwise, or when that marker did not arrive, the
//!   closing row takes an exec of its own after the check. A second closing row changes nothing.
//!   A pod that fails after its script may have written the closing row (what the statements
//!   printed fails it, or the output passed the cap) gets its opening row again, in an exec of
//!   its own, so that it stays due.
//! - Each marker is `SELECT '<nonce>:<i>' FORMAT TabSeparated`, so a `--format` or default format
//!   setting does not change how it prints, and it is read at the end of a line (after a `\r` a
//!   CRLF setting adds is taken off): a statement whose output ends without a newline
//!   (`FORMAT Values`) leaves the next marker on its last line.

use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::abandoned::{Seen, Watch};
use super::{BatchRan, Call, CheckRan, Failure, PassContext, Run, Tracked};
use crate::command;
use crate::config::ExecMode;
use crate::coordination::ledger::{self, LedgerWrite};
use crate::sql::lexer::{TokenKind, significant, tokenize};
use crate::transport::{
    Clock, ExecOutput, ExecRequest, Executor, OUTPUT_CAP, PodInfo, PodLister, TransportErrorKind,
};

/// A pod's statement list as one script, and how to read what it printed.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    nonce: String,
    script: String,
    count: usize,
    /// The script writes the ledger's closing row after its end marker, and a marker after it.
    closing: bool,
}

/// What a batch's output says about how far it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reading<'o> {
    /// What each statement whose marker was printed printed itself, in order: statement `i` was
    /// sent exactly when `i < outputs.len()`.
    pub outputs: Vec<&'o str>,
    /// The end marker was printed: every statement ended without an error.
    pub ended: bool,
    /// The marker after the ledger's closing row was printed: the row is written.
    pub closed: bool,
    /// What was printed after the end marker's line, or after the closing row's marker when the
    /// script writes one and it was printed (empty without the end marker).
    pub after: &'o str,
}

impl Reading<'_> {
    /// How many statements were sent (their marker printed).
    pub(crate) fn started(&self) -> usize {
        self.outputs.len()
    }
}

impl Batch {
    /// The script running `statements` in order, its markers carrying a nonce made from `seed`
    /// (something of the run no statement can know: see the module header).
    pub(crate) fn new(statements: &[String], seed: &str) -> Self {
        let nonce = hex::encode(&Sha256::digest(format!("batch|{seed}").as_bytes())[..12]);
        let mut script = String::new();
        for (index, statement) in statements.iter().enumerate() {
            script.push_str(&format!("SELECT '{nonce}:{index}' FORMAT TabSeparated;\n"));
            script.push_str(statement);
            if ends_with_semicolon(statement) {
                script.push('\n');
            } else {
                script.push_str("\n;\n");
            }
        }
        script.push_str(&format!("SELECT '{nonce}:end' FORMAT TabSeparated;\n"));
        Self {
            nonce,
            script,
            count: statements.len(),
            closing: false,
        }
    }

    /// The script with the ledger's rows around its statements (see the module header):
    /// `opening` before the first marker, and `closing`, when given, after the end marker and
    /// followed by a marker of its own.
    pub(crate) fn with_ledger(mut self, opening: &str, closing: Option<&str>) -> Self {
        self.script.insert_str(0, opening);
        if let Some(closing) = closing {
            self.script.push_str(closing);
            self.script
                .push_str(&format!("SELECT '{}:closed' FORMAT TabSeparated;\n", self.nonce));
            self.closing = true;
        }
        self
    }

    /// What the exec sends on stdin.
    pub(crate) fn script(&self) -> &str {
        &self.script
    }

    /// The markers in `stdout`, in order: how far the script got, and each statement's own output.
    pub(crate) fn read<'o>(&self, stdout: &'o str) -> Reading<'o> {
        let mut outputs: Vec<&'o str> = Vec::new();
        // Where the output of the statement whose marker came last starts.
        let mut from: Option<usize> = None;
        let mut at = 0usize;
        let mut ended = false;
        let mut after = "";
        for line in stdout.split_inclusive('\n') {
            let start = at;
            at += line.len();
            // The marker expected next: the first statement's, the next one's, or the end.
            let next = outputs.len() + usize::from(from.is_some());
            let expected = if next < self.count {
                format!("{}:{next}", self.nonce)
            } else {
                format!("{}:end", self.nonce)
            };
            let text = line.strip_suffix('\n').unwrap_or(line);
            let text = text.strip_suffix('\r').unwrap_or(text);
            // At the end of the line: what a statement printed without a final newline comes first.
            let Some(before) = text.strip_suffix(expected.as_str()) else {
                continue;
            };
            if let Some(begin) = from.take() {
                outputs.push(&stdout[begin..start + before.len()]);
            }
            if next >= self.count {
                ended = true;
                after = &stdout[at..];
                break;
            }
            from = Some(at);
        }
        if let Some(begin) = from {
            outputs.push(&stdout[begin..]);
        }
        // The closing row's marker: the first line after the end marker's (its script prints
        // nothing of its own).
        let mut closed = false;
        if self.closing && ended {
            let marker = format!("{}:closed", self.nonce);
            let (line, rest) = after.split_once('\n').unwrap_or((after, ""));
            if line.strip_suffix('\r').unwrap_or(line) == marker {
                closed = true;
                after = rest;
            }
        }
        Reading {
            outputs,
            ended,
            closed,
            after,
        }
    }
}

/// `statement a` or `statements a to b`, for messages.
fn span(first: usize, last: usize) -> String {
    if first == last {
        format!("statement {first}")
    } else {
        format!("statements {first} to {last}")
    }
}

/// Whether `statement` can run in a batch (see the module header): not an `INSERT` with its data
/// in the text.
pub(crate) fn batchable(statement: &str) -> bool {
    let tokens = tokenize(statement);
    let text = |t: &crate::sql::lexer::Token| t.text(statement);
    // What the clients' splitters could read otherwise than this lexer does.
    let ambiguous = tokens.iter().any(|t| {
        t.unterminated
            || t.kind == TokenKind::HereDoc
            || (t.kind == TokenKind::LineComment && !text(t).starts_with("--"))
            || (t.kind == TokenKind::BlockComment && text(t)[2..].contains("/*"))
    });
    if ambiguous {
        return false;
    }
    let keyword = |k: &str| significant(statement).any(|t| t.is_keyword(statement, k));
    // Only a comment: a client may answer its empty query with an error of its own.
    let Some(first) = significant(statement).next() else {
        return false;
    };
    let first_is = |k: &str| first.is_keyword(statement, k);
    // The session: one client runs the whole script, where each statement had a client of its own.
    let session = first_is("USE")
        || first_is("SET")
        || first_is("BEGIN")
        || first_is("COMMIT")
        || first_is("ROLLBACK")
        || keyword("TEMPORARY");
    let inline_data = first_is("INSERT") && (keyword("VALUES") || keyword("FORMAT"));
    !(session || inline_data || crate::sql::ddl_status::has_on_cluster(statement))
}

/// Whether the last significant token of `statement` is a `;` (comments may follow it).
fn ends_with_semicolon(statement: &str) -> bool {
    significant(statement)
        .last()
        .is_some_and(|t| t.is_punct(statement, ";"))
        // A comment left open would swallow what follows; the statement is then ended anyway
        // (the server refuses what the comment hid, naming it).
        && !tokenize(statement)
            .last()
            .is_some_and(|t| t.unterminated && t.kind == TokenKind::BlockComment)
}

/// A value no statement can know, for the nonce (with the script's query id): the standard
/// library's per-process random hash keys.
fn unguessable() -> String {
    use std::hash::{BuildHasher, RandomState};
    let state = RandomState::new();
    format!("{:016x}{:016x}", state.hash_one(1u8), state.hash_one(2u8))
}

/// The statement events of one pod's batch, sent as its markers arrive.
struct Progress<'b> {
    batch: &'b Batch,
    pod: &'b str,
    state: Mutex<ProgressState>,
}

#[derive(Default)]
struct ProgressState {
    /// The current attempt's stdout so far (up to the transport's cap).
    stdout: Vec<u8>,
    /// Statements whose start was reported in this attempt.
    reported: usize,
    /// The end marker was reported.
    ended: bool,
    /// When the statement reported last started.
    since: Duration,
}

impl<T: PodLister + Executor, C: Clock> Run<'_, T, C> {
    /// Whether `statements` go to a pod in one exec: under `execMode: 'perPod'`, each
    /// [`batchable`], and more than one, or one with the live-schema check or the ledger's rows
    /// around it (a statement alone is an exec either way).
    pub(super) fn batches(&self, statements: &[String]) -> bool {
        let around = self.verification.is_some() || self.ledger.is_some();
        let several = statements.len() > 1 || (statements.len() == 1 && around);
        self.exec_mode == ExecMode::PerPod && several && statements.iter().all(|s| batchable(s))
    }

    /// `statements` on `pod` in one exec (see the module header): each statement's events as its
    /// marker arrives, and a failure named by its index, as [`Run::apply_all_in`]'s loop names it.
    ///
    /// With `check` (a scratch database's name and the live-schema check's script for it), the
    /// check runs in the same exec once every statement succeeded (`command::render_batch`), and
    /// what it printed is returned for `Run::verify_after_apply` to read. With `ledger`, the
    /// ledger's opening row is written first in the script, and its closing row after the
    /// statements when `close` (nothing after them can fail the pod: see `Run::apply_all_in`);
    /// whether that row is known written is returned.
    pub(super) async fn apply_batch(
        &self,
        statements: &[String],
        pod_info: &PodInfo,
        pass: Option<&PassContext>,
        check: Option<(String, String)>,
        ledger: Option<(LedgerWrite<'_>, bool)>,
    ) -> Result<BatchRan, Failure> {
        let pod = pod_info.name.as_str();
        let count = statements.len();
        let last = count.saturating_sub(1);
        let query_id = self.script_query_id("st", pod);
        let mut batch = Batch::new(statements, &format!("{query_id}|{}", unguessable()));
        let uid = pod_info.uid.as_deref().unwrap_or("");
        let closing = ledger.as_ref().is_some_and(|(_, close)| *close);
        if let Some((write, close)) = &ledger {
            let opening = ledger::started_script(write, self.resource_id, pod, uid);
            let closing = close.then(|| ledger::finished_script(write, self.resource_id, pod, uid));
            batch = batch.with_ledger(&opening, closing.as_deref());
        }
        // Each ledger write is bounded as one statement is, as in an exec of its own.
        let bounded = count + usize::from(ledger.is_some()) + usize::from(closing);
        let mut stdin = batch.script().to_owned();
        if let Some((_, script)) = &check {
            stdin.push_str(script);
        }
        let request = ExecRequest {
            namespace: self.target.namespace.clone(),
            pod: pod.to_owned(),
            container: self.target.container.clone(),
            command: command::render_batch(
                self.client,
                self.settings,
                stdin.len(),
                self.statement_timeout,
                bounded,
                &query_id,
                check.as_ref().map(|(_, script)| script.len()),
            ),
            stdin,
            timeout: command::batch_exec_timeout(self.statement_timeout, bounded, check.is_some()),
        };
        let progress = Progress {
            batch: &batch,
            pod,
            state: Mutex::new(ProgressState::default()),
        };
        let seen = |seen: Seen<'_>| {
            let mut state = progress.state.lock().unwrap_or_else(|e| e.into_inner());
            match seen {
                Seen::Attempt => *state = ProgressState::default(),
                Seen::Stdout(chunk) => {
                    let room = OUTPUT_CAP.saturating_sub(state.stdout.len());
                    state.stdout.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    self.report(&progress, &mut state, pass);
                }
            }
        };
        // An attempt seen past its end marker ran every statement: only the check was left, and a
        // retry would run them all again for it.
        let may_retry = || !progress.state.lock().unwrap_or_else(|e| e.into_inner()).ended;
        let watch = Watch {
            seen: &seen,
            may_retry: &may_retry,
        };
        let all = span(0, last);
        let what = format!("{all} (one script)");
        let call = Call::Batch { pod, count };
        let tracked = self
            .exec_tracked_seeing(&request, &what, &query_id, Some(call), Some(&watch))
            .await;
        let (reported, ended) = {
            let state = progress.state.lock().unwrap_or_else(|e| e.into_inner());
            (state.reported, state.ended)
        };
        // The statement the script was at when it ended: the one after the last marker.
        let at = reported.saturating_sub(1);
        let (output, unknown) = match tracked {
            Tracked::Output { output, unknown } => (output, unknown),
            Tracked::CancelledBefore => {
                return Err(Failure::Error(
                    self.cancelled(&format!("before {all} were sent to pod {pod}"))
                        .with_statement_index(0)
                        .with_pod(pod),
                ));
            }
            Tracked::CancelledDuring => {
                let whence = if reported == 0 {
                    // An executor that does not stream shows no marker before the end.
                    "which of them ran is unknown".to_owned()
                } else if ended {
                    // Past the end marker: only the live-schema check after them was left.
                    "every statement of it had ended (the marker after the last one arrived)".to_owned()
                } else {
                    let done = match at {
                        0 => String::new(),
                        _ => format!(" ({} completed)", span(0, at - 1)),
                    };
                    format!(
                        "statement {at} was the last seen starting{done}, and whether {} ran is unknown",
                        span(at, last)
                    )
                };
                return Err(Failure::Error(
                    self.cancelled(&format!(
                        "while pod {pod} ran {all} as one script; its exec was closed, and {whence}"
                    ))
                    .with_statement_index(at)
                    .with_pod(pod),
                ));
            }
            Tracked::EarlierRunning { attempt } => {
                let mut err = self.earlier_attempt_running(at, pod, &query_id, attempt);
                err.message.push_str(&self.batch_note(count, attempt - 1));
                return Err(Failure::Error(err));
            }
            Tracked::Failed { err, .. }
                if err.kind == TransportErrorKind::Refused && err.http_status == Some(404) =>
            {
                return Err(Failure::Vanished);
            }
            // Every statement had ended (the end marker arrived): what failed is the exec of what
            // came after them, the ledger's closing row and the check, which then run in execs of
            // their own. What the statements printed arrived whole, and is read as on success.
            // The exec stays tracked, and is stopped before the run ends.
            Tracked::Failed { .. } if ended => {
                let stdout = {
                    let state = progress.state.lock().unwrap_or_else(|e| e.into_inner());
                    String::from_utf8_lossy(&state.stdout).into_owned()
                };
                let reading = batch.read(&stdout);
                if let Err(failure) = self.read_outputs(statements, pod, &reading) {
                    // Whether the closing row landed is unknown.
                    return Err(self.reopen_if(closing, failure, ledger.as_ref(), pod_info).await);
                }
                return Ok(BatchRan {
                    check: None,
                    closed: false,
                });
            }
            Tracked::Failed {
                err,
                attempts,
                not_retried,
            } => {
                let mut failed = self.exec_transport_failed(at, batch.script(), pod, &err, attempts);
                failed.message.push_str(&self.batch_note(count, attempts));
                if let Some(why) = not_retried {
                    failed.message.push_str(&format!(
                        " It was not retried: that attempt could not be confirmed stopped ({why}), and a \
                         retry would run beside it."
                    ));
                }
                return Err(Failure::Error(failed));
            }
        };
        // An executor that does not stream hands the whole stdout over only now.
        let reading = batch.read(&output.stdout);
        {
            let mut state = progress.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.reported < reading.started() || (reading.ended && !state.ended) {
                state.stdout = output.stdout.as_bytes().to_vec();
                self.report(&progress, &mut state, pass);
            }
        }
        // With a check, the shell's label after the end marker says the statements' client exited
        // 0 (the exec's status is 0 then, whatever the check's client did); what follows it is the
        // check's output.
        let checked = check.as_ref().map(|_| {
            reading
                .after
                .strip_prefix(command::STATEMENTS_ENDED_LABEL)
                .and_then(|rest| rest.strip_prefix('\n'))
        });
        // Without the label, exit 0 still says the statements' client ended well (the shell exits
        // with its status when it fails): an output cut before the label, or an injected executor
        // that answers the statements only. The check then runs in an exec of its own.
        let succeeded = output.exit_code == 0 || checked.is_some_and(|label| label.is_some());
        // The ledger's closing row may be on the pod whatever this package decides now: its
        // marker arrived, or the client exited 0 after it (an output past the cap hides it).
        let closing_landed = closing && (reading.closed || output.exit_code == 0);
        if succeeded && reading.ended {
            if let Err(failure) = self.read_outputs(statements, pod, &reading) {
                return Err(self
                    .reopen_if(closing_landed, failure, ledger.as_ref(), pod_info)
                    .await);
            }
            let check = check
                .zip(checked.flatten())
                .map(|((scratch, _), stdout)| CheckRan {
                    scratch,
                    stdout: stdout.to_owned(),
                });
            return Ok(BatchRan {
                check,
                closed: reading.closed,
            });
        }
        // What the client printed on stderr before the shell's label (the check's come after it).
        let stderr = output
            .stderr
            .split_once(command::STATEMENTS_ENDED_LABEL)
            .map_or(output.stderr.as_str(), |(before, _)| before);
        // The transport keeps the first OUTPUT_CAP bytes: markers past them are not there to read.
        let capped = output.stdout.len() >= OUTPUT_CAP;
        if let Some((write, _)) = &ledger {
            // The ledger's rows are the script's first statements and its last. A client that
            // failed before the first marker failed at the opening row and ran no statement (not
            // a cut input, which ran nothing and says so, nor exit 0, which is no failure; and
            // not after an attempt whose outcome is unknown, which may have run some); one that
            // failed after the end marker and before the closing row's marker, at the closing row.
            let at_opening = reading.started() == 0
                && !capped
                && output.exit_code != 0
                && output.exit_code != command::INPUT_CUT_EXIT_CODE
                && unknown == 0;
            let after_statements = if at_opening {
                Some(false)
            } else if reading.ended && closing && !reading.closed && output.exit_code != 0 {
                Some(true)
            } else {
                None
            };
            if let Some(after_statements) = after_statements {
                let mut err = self.ledger_write_failed(
                    write.config,
                    pod,
                    after_statements,
                    stderr,
                    output.exit_code,
                    &request.stdin,
                );
                if unknown > 0 {
                    // An earlier attempt may have run statements, whatever this one did.
                    err.message.push_str(&self.batch_note(count, unknown));
                }
                // A client the pod's bound ended during the closing row may have written it.
                let landed = after_statements && command::POD_TIMEOUT_EXIT_CODES.contains(&output.exit_code);
                return Err(self
                    .reopen_if(landed, Failure::Error(err), ledger.as_ref(), pod_info)
                    .await);
            }
        }
        let at = reading.started().saturating_sub(1);
        let since = progress.state.lock().unwrap_or_else(|e| e.into_inner()).since;
        let outcome = if reading.ended {
            format!("ended, then the client exited {}", output.exit_code)
        } else if output.exit_code == 0 || capped {
            format!(
                "did not end as its script's output shows (exit code {})",
                output.exit_code
            )
        } else {
            format!("failed (exit code {})", output.exit_code)
        };
        self.report_finished(pod, at, count, output.exit_code, since, Some(&outcome));
        // The statement's own output only, redacted against its own literals.
        let own = ExecOutput {
            stdout: reading
                .outputs
                .get(at)
                .map(|s| (*s).to_owned())
                .unwrap_or_default(),
            stderr: stderr.to_owned(),
            exit_code: output.exit_code,
        };
        let mut err = self.statement_failed_among(at, &statements[at], statements, pod, &own, 0);
        let seen = match reading.started() {
            0 => "no statement was seen starting".to_owned(),
            _ => format!("statement {at} was the last seen starting"),
        };
        if reading.ended {
            err.message.push_str(&format!(
                "\nEvery statement of the script of {all} ended (the marker after the last one \
                 arrived); the client exited {} after that.",
                output.exit_code
            ));
        } else if capped {
            err.message.push_str(&format!(
                "\nThe script's output reached the transport's cap ({} KiB) after {seen}, so which statement failed, \
                 if any, is not known: statement {at} or a later one, and {} may or may not have run. A list whose \
                 statements print this much runs with execMode 'perStatement' (each exec has the cap to itself).",
                OUTPUT_CAP / 1024,
                span(at, last)
            ));
        } else if output.exit_code == 0 {
            // Exited 0 without its end marker: ended early without an error, not a statement's error.
            err.message.push_str(&format!(
                "\nThe script of {all} exited 0, but its output ended without the marker that \
                 follows its last statement ({seen}), so {} may or may not have run.",
                span(at, last)
            ));
        } else if err.clickhouse_code.is_none() && command::POD_TIMEOUT_EXIT_CODES.contains(&output.exit_code)
        {
            // The pod's bound of a script is the sum of its statements' bounds.
            err.message.push_str(&format!(
                "\nThe pod's `timeout` bounds the script of {all} by {bounded} x statementTimeoutMs \
                 ({seen}); whether {} ran is unknown.",
                span(at, last)
            ));
        }
        if unknown > 0 {
            err.message.push_str(&self.batch_note(count, unknown));
        }
        Err(self
            .reopen_if(
                closing_landed || (closing && reading.ended),
                Failure::Error(err),
                ledger.as_ref(),
                pod_info,
            )
            .await)
    }

    /// The statements' own outputs, read as their execs' were (a distributed DDL status table):
    /// the first that fails the pod.
    fn read_outputs(&self, statements: &[String], pod: &str, reading: &Reading<'_>) -> Result<(), Failure> {
        for (index, printed) in reading.outputs.iter().enumerate() {
            self.read_hosts(index, &statements[index], pod, printed)?;
        }
        Ok(())
    }

    /// `failure`, once the pod's ledger is brought back to due when `landed`: the script's
    /// closing row may be on the pod although the pod failed, and a deploy that lost its state
    /// would take it as applied there. The opening row again, in an exec of its own, is newer (a
    /// second opening row changes nothing else); when that fails too, the error says so.
    async fn reopen_if(
        &self,
        landed: bool,
        failure: Failure,
        ledger: Option<&(LedgerWrite<'_>, bool)>,
        pod_info: &PodInfo,
    ) -> Failure {
        let (true, Some((write, _))) = (landed, ledger) else {
            return failure;
        };
        let Failure::Error(mut err) = failure else {
            return failure;
        };
        if let Err(again) = self.write_ledger_opening(*write, pod_info).await {
            let why = match again {
                Failure::Error(e) => e.message,
                Failure::Vanished => "the pod is gone".to_owned(),
                Failure::Stopped => "the pass stopped".to_owned(),
            };
            err.message.push_str(&format!(
                "\nThe pod's script wrote the ledger's closing row before this failure was known, and writing its \
                 opening row again (so that the pod stays due) failed: {why}. Until a deploy completes there, a \
                 deploy that lost its state may take pod {} as applied.",
                pod_info.name
            ));
        }
        Failure::Error(err)
    }

    /// What an error of a batch adds when attempts of it ended without an outcome.
    fn batch_note(&self, count: usize, unknown: u32) -> String {
        let all = span(0, count.saturating_sub(1));
        if unknown == 0 {
            return format!(" The pod's {all} ran as one script (execMode 'perPod').");
        }
        format!(
            " The pod's {all} ran as one script (execMode 'perPod'), and {unknown} attempt(s) of it ended \
             without a known outcome: {all} may have run, each at most once per attempt (statements are \
             re-runnable by contract)."
        )
    }

    /// Reports what `state.stdout` shows that was not reported yet: a statement finished when the
    /// next one's marker arrives, a statement started with its own marker.
    fn report(&self, progress: &Progress<'_>, state: &mut ProgressState, pass: Option<&PassContext>) {
        let text = String::from_utf8_lossy(&state.stdout).into_owned();
        let reading = progress.batch.read(&text);
        let count = progress.batch.count;
        let pod = progress.pod;
        while state.reported < reading.started() {
            let index = state.reported;
            if index > 0 {
                self.report_finished(pod, index - 1, count, 0, state.since, None);
            }
            self.report_started(pod, index, count, pass);
            state.since = self.clock.now();
            state.reported += 1;
        }
        if reading.ended && !state.ended {
            self.report_finished(pod, count - 1, count, 0, state.since, None);
            state.ended = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statements(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_script_puts_a_marker_before_each_statement_and_one_at_the_end() {
        let batch = Batch::new(
            &statements(&["CREATE DATABASE a", "CREATE TABLE a.t (x UInt8) ENGINE = Log;"]),
            "s",
        );
        let n = &batch.nonce;
        assert_eq!(
            batch.script(),
            format!(
                "SELECT '{n}:0' FORMAT TabSeparated;\nCREATE DATABASE a\n;\nSELECT '{n}:1' FORMAT TabSeparated;\n\
                 CREATE TABLE a.t (x UInt8) ENGINE = Log;\nSELECT '{n}:end' FORMAT TabSeparated;\n"
            )
        );
        assert_eq!(n.len(), 24);
        assert_ne!(Batch::new(&statements(&["SELECT 1"]), "t").nonce, *n);
    }

    #[test]
    fn a_trailing_line_comment_does_not_swallow_the_separator() {
        let batch = Batch::new(&statements(&["CREATE DATABASE a -- note"]), "s");
        assert!(
            batch.script().contains("CREATE DATABASE a -- note\n;\n"),
            "{}",
            batch.script()
        );
        let batch = Batch::new(&statements(&["CREATE DATABASE a; -- note"]), "s");
        assert!(
            batch.script().contains("CREATE DATABASE a; -- note\nSELECT"),
            "{}",
            batch.script()
        );
    }

    #[test]
    fn a_complete_run_gives_each_statement_its_own_output() {
        let batch = Batch::new(&statements(&["a", "b", "c"]), "s");
        let n = &batch.nonce;
        let stdout = format!("{n}:0\n{n}:1\nhost\t9000\t0\t\t0\t0\n{n}:2\n{n}:end\n");
        let reading = batch.read(&stdout);
        assert!(reading.ended);
        assert_eq!(reading.outputs, vec!["", "host\t9000\t0\t\t0\t0\n", ""]);
    }

    #[test]
    fn a_run_that_stopped_names_the_statement_after_the_last_marker() {
        let batch = Batch::new(&statements(&["a", "b", "c"]), "s");
        let n = &batch.nonce;
        let stdout = format!("{n}:0\n{n}:1\npartial");
        let reading = batch.read(&stdout);
        assert!(!reading.ended);
        assert_eq!(reading.started(), 2);
        assert_eq!(reading.outputs, vec!["", "partial"]);
        assert_eq!(batch.read("").started(), 0);
    }

    #[test]
    fn lines_that_imitate_markers_move_nothing() {
        let batch = Batch::new(&statements(&["a", "b"]), "s");
        let n = &batch.nonce;
        // Another nonce, a marker out of order, an end before the last statement, a marker with
        // text after it, another nonce's marker ending a line.
        let stdout = format!("{n}:0\n0123:1\n{n}:end\n{n}:0\n{n}:1 x\nx 0123:1\n{n}:1\n");
        let reading = batch.read(&stdout);
        assert!(!reading.ended);
        assert_eq!(
            reading.outputs,
            vec![
                format!("0123:1\n{n}:end\n{n}:0\n{n}:1 x\nx 0123:1\n").as_str(),
                ""
            ]
        );
    }

    #[test]
    fn a_marker_after_output_without_a_newline_or_before_a_carriage_return_is_read() {
        let batch = Batch::new(&statements(&["a", "b"]), "s");
        let n = &batch.nonce;
        let stdout = format!("{n}:0\r\n(1),(2){n}:1\r\nx\n{n}:end\n");
        let reading = batch.read(&stdout);
        assert!(reading.ended);
        assert_eq!(reading.outputs, vec!["(1),(2)", "x\n"]);
    }

    #[test]
    fn what_a_client_could_split_or_run_otherwise_is_not_batched() {
        for statement in [
            "USE shop",
            "SET max_threads = 1",
            "CREATE TEMPORARY TABLE t (x UInt8)",
            "BEGIN TRANSACTION",
            "CREATE TABLE a.t (x UInt8) ENGINE = Log /* open",
            "CREATE TABLE a.t (x UInt8) ENGINE = Log /* a /* b */ ; DROP TABLE x; -- */",
            "CREATE TABLE a.t (x UInt8) ENGINE = Log # note",
            "CREATE TABLE a.t (x UInt8) ENGINE = Log // note",
            "CREATE FUNCTION f AS (x) -> $$a;b$$",
            "SELECT 'open",
            "CREATE DATABASE a ON CLUSTER c",
        ] {
            assert!(!batchable(statement), "{statement}");
        }
        for statement in [
            "CREATE TABLE a.t (x UInt8) ENGINE = Log -- note",
            "CREATE TABLE a.t (x UInt8) ENGINE = Log /* note */",
            "CREATE TABLE a.settings (x UInt8) ENGINE = Log",
            "ALTER TABLE a.t MODIFY SETTING index_granularity = 8192",
        ] {
            assert!(batchable(statement), "{statement}");
        }
    }

    #[test]
    fn an_insert_with_its_data_in_the_text_is_not_batched() {
        assert!(!batchable("INSERT INTO a.t VALUES (1)"));
        assert!(!batchable("insert into a.t format CSV\n1\n"));
        assert!(batchable("INSERT INTO a.t SELECT * FROM a.s"));
        assert!(batchable("CREATE TABLE a.t (values UInt8) ENGINE = Log"));
        assert!(!batchable("-- only a comment"));
    }
}
