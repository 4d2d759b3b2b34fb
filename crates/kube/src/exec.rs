//! `pods/exec` over kube-rs's WebSocket client.
//!
//! Three rules keep an exec from hanging or losing its result:
//!
//! - stdin is written, flushed and then left open. The rendered command frames
//!   its input with `head -c <N>`, so the remote side never waits for EOF.
//!   Closing it would be worse than useless: on the v4 channel protocol kube-rs
//!   has no EOF frame and closes the whole WebSocket instead, losing the output
//!   and the exit status.
//! - stdin, stdout and stderr are serviced concurrently. kube-rs's internal
//!   pipes are small and its message loop blocks when one fills, so reading
//!   only after writing (or one stream after the other) can deadlock.
//! - captured output is capped, but reading continues past the cap: a remote
//!   that cannot write blocks forever.
//! - the status frame, not end-of-output, ends the exec. On a dropped
//!   connection kube-rs ends its loop without shutting its stdout/stderr pipes
//!   (their readers never see EOF), and a process that exits without reading
//!   all of stdin leaves the stdin writer blocked on a full pipe.

use std::pin::pin;
use std::time::Duration;

use clickhouse_schema_core::transport::{
    ExecOutput, ExecRequest, ExecStatus, TransportError, TransportErrorKind, exec_without_status,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::error::{chain, from_kube};

/// Per stream (the core's cap, shared with the JavaScript transport).
pub use clickhouse_schema_core::transport::OUTPUT_CAP;

/// Size of kube-rs's internal pipes; larger than its 1 KiB default so a
/// statement or an error message moves in a few chunks rather than hundreds.
const PIPE_SIZE: usize = 64 << 10;

/// Runs `request`, handing `seen` each piece of stdout as it arrives (see `Executor::exec_seeing`).
pub(crate) async fn exec(
    client: &kube::Client,
    request: ExecRequest,
    seen: &(dyn Fn(&[u8]) + Send + Sync),
) -> Result<ExecOutput, TransportError> {
    let timeout = request.timeout;
    // Dropping the inner future on timeout drops the AttachedProcess, which
    // aborts its message loop and closes the WebSocket: the API server then
    // ends the remote process.
    match tokio::time::timeout(timeout, run(client, &request, seen)).await {
        Ok(result) => result,
        Err(_) => Err(TransportError::new(
            TransportErrorKind::Timeout,
            format!("the exec did not finish within {}", human(timeout)),
        )),
    }
}

async fn run(
    client: &kube::Client,
    request: &ExecRequest,
    seen: &(dyn Fn(&[u8]) + Send + Sync),
) -> Result<ExecOutput, TransportError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &request.namespace);
    let params = AttachParams::default()
        .container(request.container.clone())
        .stdin(true)
        .stdout(true)
        .stderr(true)
        .max_stdin_buf_size(PIPE_SIZE)
        .max_stdout_buf_size(PIPE_SIZE)
        .max_stderr_buf_size(PIPE_SIZE);
    let mut process = api
        .exec(&request.pod, request.command.clone(), &params)
        .await
        .map_err(|e| from_kube(&e))?;

    let (Some(mut stdin), Some(stdout), Some(stderr), Some(status)) = (
        process.stdin(),
        process.stdout(),
        process.stderr(),
        process.take_status(),
    ) else {
        // AttachParams asked for all three streams, so kube-rs hands them out exactly once.
        return Err(TransportError::new(
            TransportErrorKind::Transient,
            "kube-rs did not provide the exec's stdin, stdout and stderr",
        ));
    };

    let status = {
        let input = request.stdin.as_bytes();
        // Never completes: once stdin is written it just holds the writer open.
        let writing = async {
            // A write error means the message loop already ended; the status
            // (or its absence) says why, so the error itself adds nothing.
            if stdin.write_all(input).await.is_ok() {
                let _ = stdin.flush().await;
            }
            std::future::pending::<()>().await
        };
        let reading = async { tokio::join!(read_capped(stdout, seen), read_capped(stderr, &|_| {})) };
        let mut writing = pin!(writing);
        let mut reading = pin!(reading);
        let mut status = pin!(status);
        let mut output = None;
        // The status ends the loop (see the module docs); the writer and
        // readers only make progress while it is awaited.
        let status = loop {
            tokio::select! {
                status = &mut status => break status,
                read = &mut reading, if output.is_none() => output = Some(read),
                () = &mut writing => {}
            }
        };
        match status {
            // After the status frame kube-rs shuts both pipes, so the rest of the output is a read away.
            Some(status) => match output {
                Some(output) => Ok((status, output)),
                None => Ok((status, reading.await)),
            },
            None => Err(()),
        }
    };
    // Only now may stdin go: the process has finished (or the connection is gone).
    drop(stdin);
    let ended = process.join().await;

    let Ok((status, (stdout, stderr))) = status else {
        let cause = ended.err().map(|e| chain(&e));
        return Err(exec_without_status(cause.as_deref()));
    };
    let exit_code = exit_code(&status)?;
    Ok(ExecOutput {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        exit_code,
    })
}

/// Reads to EOF, keeping at most [`OUTPUT_CAP`] bytes, and handing `seen` what it keeps as it comes.
async fn read_capped(mut from: impl AsyncRead + Unpin, seen: &(dyn Fn(&[u8]) + Send + Sync)) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                if room > 0 {
                    seen(&buf[..n.min(room)]);
                }
            }
        }
    }
}

/// The exit code from the status frame kubelet sends when the process ends:
/// the core's rule ([`ExecStatus::exit_code`]), shared with the JavaScript
/// transport, applied to kube-rs's typed `Status`.
pub fn exit_code(status: &Status) -> Result<i32, TransportError> {
    let frame = serde_json::to_value(status)
        .and_then(serde_json::from_value::<ExecStatus>)
        .map_err(|e| {
            TransportError::new(
                TransportErrorKind::InvalidResponse,
                format!("the exec's status frame could not be read: {e}"),
            )
        })?;
    frame.exit_code()
}

fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

    fn failure(reason: &str, causes: Vec<(&str, &str)>) -> Status {
        Status {
            status: Some("Failure".into()),
            reason: Some(reason.into()),
            message: Some("command terminated with non-zero exit code".into()),
            details: Some(StatusDetails {
                causes: Some(
                    causes
                        .into_iter()
                        .map(|(r, m)| StatusCause {
                            reason: Some(r.into()),
                            message: Some(m.into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn success_is_zero() {
        let s = Status {
            status: Some("Success".into()),
            ..Default::default()
        };
        assert_eq!(exit_code(&s), Ok(0));
    }

    #[test]
    fn non_zero_exit_code_is_parsed_from_the_exit_code_cause() {
        assert_eq!(
            exit_code(&failure("NonZeroExitCode", vec![("ExitCode", "62")])),
            Ok(62)
        );
        // Other causes may come first.
        assert_eq!(
            exit_code(&failure(
                "NonZeroExitCode",
                vec![("Other", "x"), ("ExitCode", "139")]
            )),
            Ok(139)
        );
    }

    #[test]
    fn unreadable_exit_code_is_an_error_not_a_guess() {
        for s in [
            failure("NonZeroExitCode", vec![("ExitCode", "sixty-two")]),
            failure("NonZeroExitCode", vec![]),
            Status {
                status: Some("Failure".into()),
                reason: Some("NonZeroExitCode".into()),
                ..Default::default()
            },
        ] {
            let e = exit_code(&s).expect_err("no exit code");
            assert_eq!(e.kind, TransportErrorKind::Refused, "{s:?}");
        }
    }

    #[test]
    fn failure_to_start_is_not_an_exit_code() {
        let mut s = failure("InternalError", vec![]);
        s.message = Some("exec: \"sh\": executable file not found in $PATH".into());
        let e = exit_code(&s).expect_err("did not run");
        assert_eq!(e.kind, TransportErrorKind::ProgramMissing);
        assert!(e.message.contains("executable file not found"), "{}", e.message);

        s.message = Some("failed to exec in container: container is stopping".into());
        let e = exit_code(&s).expect_err("did not run");
        assert_eq!(e.kind, TransportErrorKind::Transient);

        let s = Status {
            status: Some("Failure".into()),
            code: Some(403),
            message: Some("forbidden".into()),
            ..Default::default()
        };
        assert_eq!(
            exit_code(&s).expect_err("refused").kind,
            TransportErrorKind::Refused
        );
        let s = Status::default();
        assert_eq!(
            exit_code(&s).expect_err("empty").kind,
            TransportErrorKind::Refused
        );
    }

    #[tokio::test]
    async fn read_capped_keeps_the_cap_and_drains_the_rest() {
        let data = vec![b'x'; OUTPUT_CAP + 12345];
        let seen = std::sync::Mutex::new(0usize);
        let kept = read_capped(&data[..], &|chunk| *seen.lock().unwrap() += chunk.len()).await;
        assert_eq!(kept.len(), OUTPUT_CAP);
        // What is seen as it comes is what is kept, no more.
        assert_eq!(*seen.lock().unwrap(), OUTPUT_CAP);
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human(Duration::from_secs(2)), "2 s");
        assert_eq!(human(Duration::from_millis(1500)), "1500 ms");
    }
}
