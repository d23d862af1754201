"""The account checks' judgement (sans-I/O): a kubeconfig error, a credential, a failed
``GET /version``, each turned into a finding whose hint names the field to change."""

from __future__ import annotations

from datetime import datetime

import agent

from ._findings import Finding, Verdict
from ._judge import (
    CertFacts,
    KubeconfigFacts,
    cert_facts,
    expiry,
    jwt_claims,
    jwt_expiry,
    refused,
    ssl_failure,
)

__all__ = [
    "api_server_failure",
    "credential_findings",
    "describe_credential",
    "kubeconfig_failure",
]


def kubeconfig_failure(account: agent.AccountConfig, index: int, exc: agent.ConfigError) -> Finding:
    """The account's kubeconfig (or service account) cannot be used: the loader's own message
    (file, path inside it, problem) and what to change."""
    where = f"kubernetes.accounts[{index}]"
    problem = exc.problem
    file = exc.file or account.kube_config_file or "the kubeconfig"
    if account.service_account:
        hint = (
            f"{where}.serviceAccount: true works only inside a pod with a service account "
            "token mounted; outside one, give kubeConfigFile"
        )
    elif "does not exist" in problem or "none of the KUBECONFIG" in problem:
        hint = (
            f"fix {where}.kubeConfigFile ({file}), or mount the kubeconfig there (a Secret "
            "volume) before the agent starts"
        )
    elif problem.startswith("cannot read"):
        hint = (
            f"make {file} a file the agent's user can read (owner and mode; for a Secret "
            "volume, its defaultMode)"
        )
    elif problem.startswith("no context"):
        hint = f"set {where}.context to one of the contexts listed, or add that context to {file}"
    elif problem.startswith("no context given"):
        hint = f"set {where}.context, or current-context in {file}"
    elif problem.startswith("invalid YAML"):
        hint = f"fix the YAML of {file} at {exc.path or 'the place given'}"
    else:
        hint = f"fix {file}" + (f" at {exc.path}" if exc.path else "") + f": {problem}"
    return Finding(account.name, "kubeconfig", Verdict.FAIL, str(exc), hint)


def describe_credential(access: agent.ClusterAccess) -> str:
    if access.exec is not None:
        return f"exec plugin {access.exec.command}"
    if access.token_file:
        return f"token file {access.token_file}"
    if access.token:
        return "bearer token"
    if access.client_cert_pem:
        return "client certificate"
    if access.username:
        return f"basic auth (user {access.username})"
    return "no credential"


def _user_field(facts: KubeconfigFacts, field: str) -> str:
    user = f"users[name={facts.user}].user" if facts.user else "the user's"
    return f"{user}.{field} in {facts.file}"


def credential_findings(
    account: str,
    access: agent.ClusterAccess,
    credential: agent.Credential,
    facts: KubeconfigFacts,
    now: datetime,
) -> list[Finding]:
    """When the credential the account presents ends (a JWT's ``exp``, an exec credential's
    ``expirationTimestamp``, a client certificate's notAfter), one finding each."""
    found: list[Finding] = []
    check = "credential"
    if access.exec is not None:
        expires = credential.expires_at
        if expires is None and credential.token and (claims := jwt_claims(credential.token)):
            expires = jwt_expiry(claims)
        found.append(
            expiry(
                account,
                check,
                f"exec plugin {access.exec.command} credential",
                expires,
                now,
                renews=True,
                fix=f"check the exec plugin's setup ({_user_field(facts, 'exec')})",
            )
        )
    elif credential.token:
        claims = jwt_claims(credential.token)
        source = f"token file {access.token_file}" if access.token_file else "bearer token"
        if claims is None:
            found.append(
                Finding(
                    account,
                    check,
                    Verdict.OK,
                    f"{source} (not a JWT: its expiry cannot be read; the api-server check "
                    "shows whether it is accepted)",
                )
            )
        else:
            subject = f", sub {claims['sub']}" if isinstance(claims.get("sub"), str) else ""
            if access.token_file:
                fix = (
                    f"see what writes {access.token_file} (a projected service-account token "
                    "is renewed by the kubelet)"
                )
            else:
                fix = (
                    f"put a new token in {_user_field(facts, 'token')} (e.g. `kubectl create "
                    "token <serviceaccount> -n <namespace> --duration=8760h`), or use a tokenFile "
                    "or exec plugin that renews itself"
                )
            found.append(
                expiry(
                    account,
                    check,
                    f"{source} (JWT{subject})",
                    jwt_expiry(claims),
                    now,
                    renews=bool(access.token_file),
                    fix=fix,
                )
            )
    elif access.username:
        found.append(Finding(account, check, Verdict.OK, f"basic auth (user {access.username})"))
    cert = credential.client_cert_pem or access.client_cert_pem
    if cert:
        certs = cert_facts(cert)
        if not certs:
            found.append(
                Finding(
                    account,
                    check,
                    Verdict.FAIL,
                    "the client certificate is not a PEM certificate",
                    f"fix {_user_field(facts, 'client-certificate-data')}",
                )
            )
        else:
            leaf = certs[0]
            found.append(
                expiry(
                    account,
                    check,
                    f"client certificate {leaf.subject} (issued by {leaf.issuer})",
                    leaf.not_after,
                    now,
                    renews=access.exec is not None,
                    fix=(
                        f"issue a new client certificate for {leaf.subject} and put it in "
                        f"{_user_field(facts, 'client-certificate-data')} (with its key)"
                    ),
                )
            )
    if not found:
        found.append(
            Finding(
                account,
                check,
                Verdict.WARN,
                "no credential: the agent's requests are anonymous",
                f"add a token, client certificate or exec plugin to {_user_field(facts, '')}",
            )
        )
    return found


def api_server_failure(
    account: str,
    exc: agent.KubeError,
    access: agent.ClusterAccess,
    facts: KubeconfigFacts,
    peer: CertFacts | None,
    credential_expired: bool,
    seconds: float,
) -> Finding:
    """Why ``GET /version`` failed, and the field that fixes it."""
    check = "api-server"
    server_field = (
        f"clusters[name={facts.cluster}].cluster.server in {facts.file}"
        if facts.cluster
        else f"the cluster's server URL in {facts.file}"
    )
    verify = ssl_failure(exc)
    if verify is not None:
        message = verify.verify_message or str(verify)
        presented = (
            f"{peer.subject} issued by {peer.issuer}" if peer else "a certificate we could not read"
        )
        if "mismatch" in message.lower():
            names = ", ".join(peer.names) if peer and peer.names else "other names"
            return Finding(
                account,
                check,
                Verdict.FAIL,
                f"{access.server}: the certificate ({presented}) is for {names}, not this "
                f"address: {message}",
                f"use one of those names in {server_field}, or set tls-server-name in the "
                "same cluster entry",
            )
        if "expired" in message.lower():
            return Finding(
                account,
                check,
                Verdict.FAIL,
                f"{access.server}: the API server's certificate ({presented}) has expired",
                "renew the API server's serving certificate",
            )
        configured = ", ".join(c.subject for c in cert_facts(access.ca_pem or b"")) or "none"
        if access.ca_pem:
            place = facts.ca_place()
            trusted = f"the CA in {place} ({configured})"
        else:
            place = facts.ca_place() + " (none is set: the system's trust store was used)"
            trusted = "the system's trust store"
        issuer = peer.issuer if peer else "the cluster's CA"
        return Finding(
            account,
            check,
            Verdict.FAIL,
            f"{access.server} presents {presented}, which {trusted} does not verify "
            f"({message}): wrong CA",
            f"put the CA that issued the API server's certificate ({issuer}) in {place}; "
            "`kubectl config view --raw --minify` on a machine that connects shows it, as does "
            "the cluster's ca.crt",
        )
    if isinstance(exc, agent.KubeTimeoutError):
        return Finding(
            account,
            check,
            Verdict.FAIL,
            f"{access.server}: no answer within {seconds:g} s",
            f"check {server_field}, and that this host reaches it (firewall, proxy: "
            "HTTPS_PROXY / NO_PROXY, noProxy)",
        )
    if isinstance(exc, agent.KubeConnectionError):
        what = "nothing answers there" if refused(exc) else "the connection failed"
        return Finding(
            account,
            check,
            Verdict.FAIL,
            f"{access.server}: {what}: {exc}",
            f"check {server_field}, that the API server is up, and that this host reaches "
            "it (firewall, proxy: HTTPS_PROXY / NO_PROXY, noProxy)",
        )
    if isinstance(exc, agent.KubeUnauthorizedError):
        if credential_expired:
            hint = "renew the expired credential (see the credential line)"
        elif access.exec is not None:
            hint = f"the exec plugin's credential is refused: check {_user_field(facts, 'exec')}"
        elif access.client_cert_pem and not access.token:
            hint = (
                f"the client certificate is refused: it must be issued by the cluster's client "
                f"CA ({_user_field(facts, 'client-certificate-data')})"
            )
        elif access.token or access.token_file:
            hint = (
                f"put a token the cluster accepts in {_user_field(facts, 'token')} (e.g. "
                "`kubectl create token <serviceaccount> -n <namespace>`)"
            )
        else:
            hint = f"add a credential to {_user_field(facts, '')}"
        return Finding(
            account,
            check,
            Verdict.FAIL,
            f"{access.server} refuses the credential ({describe_credential(access)}): 401 "
            "Unauthorized",
            hint,
        )
    if isinstance(exc, agent.KubeForbiddenError):
        return Finding(
            account,
            check,
            Verdict.FAIL,
            f"{access.server}: {exc}",
            "allow get on the non-resource URL /version (the system:public-info-viewer "
            "ClusterRole)",
        )
    if isinstance(exc, agent.KubeCredentialError):
        return Finding(
            account,
            check,
            Verdict.FAIL,
            f"no credential to send: {exc}",
            "see the credential line",
        )
    return Finding(account, check, Verdict.FAIL, f"{access.server}: {exc}")
