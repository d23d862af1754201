"""TLS for the Kubernetes client: contexts (the cluster CA, insecure mode, client
certificates) and :class:`TlsStream`, the TLS layer under both of its transports."""

from __future__ import annotations

import os
import ssl
import tempfile
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from .._errors import KubeError
from ._kubeconfig import ClusterAccess

__all__ = ["TlsStream", "load_client_certificate", "shared_ssl_context", "ssl_context"]

READ_SIZE = 256 * 1024

# Contexts without a client certificate, shared by every client with the same CA, insecure
# flag and ALPN list: an agent with 1,000 accounts of clusters behind one proxy (one CA)
# holds one context per ALPN list, not two per account (~20 KB each, the CA parsed again
# each time). Held weakly: the last client using one frees it.
_SHARED: weakref.WeakValueDictionary[tuple[bytes, bool, tuple[str, ...]], ssl.SSLContext] = (
    weakref.WeakValueDictionary()
)


def ssl_context(access: ClusterAccess) -> ssl.SSLContext:
    if access.ca_pem:
        try:
            context = ssl.create_default_context(cadata=access.ca_pem.decode())
        except (ssl.SSLError, ValueError) as exc:
            raise KubeError(f"{access.source}: the cluster CA is not valid PEM: {exc}") from exc
    else:
        context = ssl.create_default_context()
    if access.insecure_skip_tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def shared_ssl_context(access: ClusterAccess, alpn: Sequence[str]) -> ssl.SSLContext:
    """A context for ``access`` with ``alpn`` set, shared with every other caller asking for
    the same CA, insecure flag and ALPN list. Callers must never change it (a client that
    needs a client certificate makes its own with ``ssl_context``). Raises KubeError for a
    bad CA."""
    key = (access.ca_pem or b"", access.insecure_skip_tls_verify, tuple(alpn))
    context = _SHARED.get(key)
    if context is None:
        context = ssl_context(access)
        if alpn:
            context.set_alpn_protocols(list(alpn))
        _SHARED[key] = context
    return context


def load_client_certificate(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Install a client certificate from memory (ssl only loads files: a private temp dir)."""
    with tempfile.TemporaryDirectory(prefix="kubesvc-cert-") as folder:
        cert_path = Path(folder) / "tls.crt"
        key_path = Path(folder) / "tls.key"
        cert_path.write_bytes(cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key_pem)
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            raise KubeError(f"the client certificate or key is not valid: {exc}") from exc


class TlsStream(trio.abc.Stream):
    """TLS over a trio byte stream (ssl.MemoryBIO): a TCP connection, or a proxy's tunnel.

    Why not trio.SSLStream: it returns one TLS record (<= 16 KiB) per receive_some, each with
    a checkpoint (a pass through the scheduler), ~3 per 4.4 KB watch event's worth of frames.
    ``receive_some`` here decrypts every whole record read so far in one call and touches the
    network only when none is left. One task receives at a time; sends (and TLS bytes a read
    produced, such as a TLS 1.3 KeyUpdate) go out under one lock, in the order the TLS object
    made them. TLS failures raise trio.BrokenResourceError (the cause kept), as trio.SSLStream
    does; an EOF, clean or not, reads as ``b""``. Owns ``transport``: ``aclose`` closes it.
    """

    def __init__(
        self,
        transport: trio.abc.Stream,
        context: ssl.SSLContext,
        server_hostname: str | None,
    ) -> None:
        self.transport = transport
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
        )
        self._send_lock = trio.Lock()
        self._peer_der: bytes | None = None
        # A TCP connection is read straight from its socket (``_read_network``).
        self._socket = transport.socket if isinstance(transport, trio.SocketStream) else None

    def selected_alpn_protocol(self) -> str | None:
        return self._tls.selected_alpn_protocol()

    def getpeercert(self, binary_form: bool = True) -> bytes | None:
        """The server's certificate (DER; the only form asked for here), as the handshake
        received it: ssl's own answer raises ValueError once the connection has failed (a
        fatal alert puts it back "in handshake"), which must not crash whoever asks."""
        return self._peer_der

    async def do_handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLError, ssl.CertificateError) as exc:
                raise trio.BrokenResourceError(f"TLS handshake failed: {exc}") from exc
            await self._send_pending()
            data = await self.transport.receive_some(READ_SIZE)
            if not data:
                raise trio.BrokenResourceError("the server closed the connection in the handshake")
            self._incoming.write(data)
        der = self._tls.getpeercert(binary_form=True)
        self._peer_der = der if isinstance(der, bytes) else None
        await self._send_pending()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Up to about ``max_bytes`` of plaintext (at least one byte), ``b""`` at EOF."""
        chunks: list[bytes] = []
        await self._receive(chunks.append, max_bytes or READ_SIZE)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def receive_into(self, buffer: bytearray, max_bytes: int) -> int:
        """``receive_some``, appending to ``buffer`` (each record's plaintext is copied once,
        not joined first); returns how many bytes it added, 0 at EOF."""
        before = len(buffer)
        await self._receive(buffer.extend, max_bytes)
        return len(buffer) - before

    async def _receive(self, sink: Callable[[bytes], object], max_bytes: int) -> None:
        """Give ``sink`` the plaintext of every whole record received (up to about
        ``max_bytes``, at least one byte), reading the network only when none is left; gives
        nothing at EOF."""
        tls = self._tls
        incoming = self._incoming
        while True:
            room = max_bytes
            ended = False
            # ``read`` only when there is something to decrypt: on an idle connection each
            # wake brings one small record, and a read of nothing raises SSLWantReadError.
            if incoming.pending or tls.pending() or incoming.eof:
                try:
                    while room > 0:
                        chunk = tls.read(room)
                        if not chunk:  # the server's close_notify
                            ended = True
                            break
                        sink(chunk)
                        room -= len(chunk)
                        if not (incoming.pending or tls.pending()):
                            break
                except ssl.SSLWantReadError:
                    pass
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    ended = True
                except ssl.SSLError as exc:
                    raise trio.BrokenResourceError(f"TLS read failed: {exc}") from exc
            if self._outgoing.pending:
                await self._send_pending()
            if room < max_bytes or ended:
                return
            data = await self._read_network(max_bytes)
            if not data:
                incoming.write_eof()
            else:
                incoming.write(data)

    async def _read_network(self, max_bytes: int) -> bytes | bytearray:
        """The next bytes from the network, ``b""`` at EOF.

        A TCP socket is waited for first and then read, rather than through
        ``SocketStream.receive_some``, which tries a read first: the caller comes here only
        when everything received was used, so that read would almost always fail with EAGAIN.
        An agent with 12,000 idle watches wakes hundreds of times a second for a bookmark or
        two; each wake saves a failed system call, its exception and trio's checkpoint after
        a read that did not wait. The wait is the checkpoint."""
        sock = self._socket
        if sock is None:
            return await self.transport.receive_some(max_bytes)
        while True:
            if sock.fileno() == -1:
                raise trio.ClosedResourceError("the TLS connection's socket was closed")
            await trio.lowlevel.wait_readable(sock)
            try:
                return os.read(sock.fileno(), max_bytes)
            except BlockingIOError:
                continue  # woken without data (rare): wait again
            except OSError as exc:
                raise trio.BrokenResourceError(f"the connection broke: {exc}") from exc

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self._tls.write(data)
        except ssl.SSLError as exc:
            raise trio.BrokenResourceError(f"TLS write failed: {exc}") from exc
        await self._send_pending()

    async def _send_pending(self) -> None:
        # Without a wait for the lock when no other send is under way (the usual case): an
        # uncontended ``async with lock`` is still a pass through the scheduler.
        if not self._send_lock.locked():
            self._send_lock.acquire_nowait()
            try:
                data = self._outgoing.read()
                if data:
                    await self.transport.send_all(data)
            finally:
                self._send_lock.release()
            return
        async with self._send_lock:
            data = self._outgoing.read()
            if data:
                await self.transport.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.transport.aclose()
