"""The client's two daemon threads: keepalives and the order watcher (or, on a
session, the handler of pushed orders).

Both are bounded (every wait has a timeout, every loop checks the stop event) and
stop on close() or when the coordinator says this incarnation is fenced off: a
zombie that kept sending keepalives would keep a dead agent's lease alive, and one that
kept watching would carry out its replacement's rollback orders. The asyncio
client runs the same loops as tasks (aio.py) and shares how errors are judged here.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable

import grpc

from agent_client.connection import RETRYABLE, CoordinatorUnavailable, Rejected

log = logging.getLogger("agent_client")
FENCED = (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND)
WATCH_STREAM_S = 30.0  # a watch stream is re-opened this often (and after any error)
RECONNECT_S = 0.2


def fenced_reason(exc: Rejected | CoordinatorUnavailable) -> str | None:
    """Why a failed keepalive means this incarnation is fenced off, or None (logged; retry)."""
    if isinstance(exc, Rejected) and exc.code in FENCED:
        return exc.reason
    log.warning("keepalive: %s", exc)
    return None


def stream_failed(err: grpc.RpcError, redirect: Callable[[grpc.RpcError], None]) -> str | None:
    """An order stream ended with an error: follow the leader if it moved, else log it.
    Returns why this incarnation is fenced off, if that is what the error says (a newer
    incarnation registered, or this one was declared failed): stop watching then."""
    if err.code() in RETRYABLE:
        redirect(err)
    elif err.code() in FENCED:
        return err.details() or err.code().name
    elif err.code() != grpc.StatusCode.CANCELLED:
        log.warning("order stream: %s %s", err.code().name, err.details())
    return None


# How long watched orders wait after register() for the agent's next call (its
# start-up: restore(), sync_orders()) before they are carried out anyway.
START_UP_GRACE_S = 5.0

class KeepaliveSender:
    def __init__(self, beat: Callable[[], Any], interval: float, on_fenced: Callable[[str], None]) -> None:
        self._beat, self.interval, self._on_fenced = beat, interval, on_fenced
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raftpoint-keepalive", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._beat()
            except (Rejected, CoordinatorUnavailable) as exc:
                reason = fenced_reason(exc)
                if reason is not None:
                    self._on_fenced(reason)
                    return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)


class OrderWatcher:
    """Keeps a WatchOrders stream open and hands each order to `handle` once per order
    id (the server re-sends unacknowledged orders on every new stream)."""

    def __init__(self, open_stream: Callable[[float], tuple[Any, Any]], redirect: Callable[[grpc.RpcError], None],
                 handle: Callable[[Any], None], on_fenced: Callable[[str], None]) -> None:
        self._open, self._redirect, self._handle, self._on_fenced = open_stream, redirect, handle, on_fenced
        self._stop = threading.Event()
        self._call: Any = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="raftpoint-orders", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            call = None
            try:
                call, items = self._open(WATCH_STREAM_S)
                with self._lock:
                    self._call = call
                if self._stop.is_set():
                    call.cancel()
                for order in items:
                    self._handle(order)
            except grpc.RpcError as err:
                reason = stream_failed(err, self._redirect)
                if reason is not None:
                    self._on_fenced(reason)
                    return
            except (Rejected, CoordinatorUnavailable) as exc:
                log.warning("order not carried out, will retry: %s", exc)
            except Exception:  # e.g. the agent's on_rollback raised: keep watching, retry the order
                log.exception("order handling failed, will retry")
            finally:
                if call is not None:
                    call.cancel()  # an abandoned stream would keep its server-side poller running
            self._stop.wait(RECONNECT_S)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            if self._call is not None:
                self._call.cancel()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)


class PushedOrders:
    """Carries out the orders a session pushes, one at a time, on a thread of its own
    (the session's reader must not block on the calls an order makes). When handling
    fails, the watch is renewed after RECONNECT_S (`rewatch`): the coordinator then
    pushes every order still pending again, as a new WatchOrders stream would, and
    none it has dropped meanwhile (a superseded rollback)."""

    def __init__(self, handle: Callable[[Any], None], rewatch: Callable[[], None]) -> None:
        self._handle, self._rewatch = handle, rewatch
        self._orders: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raftpoint-orders", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def push(self, order: Any) -> None:
        self._orders.put(order)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                order = self._orders.get(timeout=0.5)
            except queue.Empty:
                continue
            if order is None:
                return
            try:
                self._handle(order)
            except (Rejected, CoordinatorUnavailable) as exc:
                log.warning("order not carried out, will retry: %s", exc)
                self._retry()
            except Exception:  # e.g. the agent's on_rollback raised: retry the order
                log.exception("order handling failed, will retry")
                self._retry()

    def _retry(self) -> None:
        if not self._stop.wait(RECONNECT_S):
            self._rewatch()

    def stop(self) -> None:
        self._stop.set()
        self._orders.put(None)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)
