#!/usr/bin/env python3
"""Start the moto AWS emulator on loopback, seeded with what moto lacks.

What this adds on top of a plain `moto_server`:

* EKS-optimized AMI public SSM parameters (Amazon Linux 2, Amazon Linux 2023,
  Bottlerocket) for Kubernetes 1.29-1.34, in every region of every account,
  with AMI ids that are also registered as images in moto's EC2 backend of the
  same region (so DescribeImages / RunInstances / CreateFleet accept them).
  moto cannot take `/aws/...` names through PutParameter, so they are put
  straight into the in-process backends.
* Seeding survives `POST /moto-api/reset`: it is hooked into the creation of
  moto's SSM parameter store and EC2 AMI table, which reset re-runs. Nothing
  to call after a reset. `POST /nodewright/seed` re-inserts the parameters and
  images into every backend that exists now (e.g. after a test deleted some).
* EC2 instance-type validation and AMI validation are switched ON (moto has
  both off by default), so an unknown instance type or AMI fails as on AWS.
* DescribeCapacityReservations (moto has no capacity reservations): answered
  here from the reservations put with `POST /nodewright/capacity-reservations`
  (state "active" only, as the adapter asks; no other filter is applied).

Extra HTTP endpoints (same port as moto):
  GET  /nodewright/health                 -> 200 {"ok": true, "moto": "<version>"}
  GET  /nodewright/manifest?region=R      -> 200 {"parameters": {...}, "images": [...]}
  POST /nodewright/seed                   -> 200 {"seeded": [[account, region], ...]}
  POST /nodewright/capacity-reservations  body: a JSON list of reservations
       ({"CapacityReservationId", "InstanceType", "AvailabilityZone",
       "OwnerId", "TotalInstanceCount", "AvailableInstanceCount",
       "InstanceMatchCriteria", "ReservationType", "EndDate", "Tags": {k: v}});
       each replaces one of the same id -> 200 {"capacityReservations": N}

AMI ids: "ami-" + first 17 hex digits of
sha256("nodewright:<region>:<family>:<k8s>:<arch>:<variant>"), family in
{al2, al2023, bottlerocket}, arch in {x86_64, arm64}, variant in
{standard, gpu, nvidia}. They differ per region as on AWS.

Usage: moto_launcher.py [--host 127.0.0.1] [--port 0] [--port-file FILE]
                        [--manifest FILE] [--al2-all-versions]
                        [--no-ami-validation]
Port 0 picks a free port; the port is printed on stdout as
"NODEWRIGHT_MOTO_PORT=<port>" and written to --port-file (atomically) once the
server accepts connections. SIGTERM / SIGINT shut it down cleanly (exit 0).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import signal
import sys
import threading
from typing import Any

# moto reads these at import time: set them before the first moto import.
# (moto treats any non-empty value as "on", so "false" would not switch it off.)
os.environ["MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION"] = "true"
os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

K8S_VERSIONS = ["1.29", "1.30", "1.31", "1.32", "1.33", "1.34"]
# EKS publishes no Amazon Linux 2 AMIs for Kubernetes 1.33 and later: the
# AL2 parameters for those versions do not exist on AWS either.
AL2_LAST_VERSION = "1.32"
AMAZON_EKS_AMI_OWNER = "602401143452"
BOTTLEROCKET_AMI_OWNER = "092701018921"
AL_RELEASE_DATE = "20250915"
BOTTLEROCKET_VERSION = "1.46.0"

SETTINGS: dict[str, Any] = {"al2_all_versions": False}


def ami_id(region: str, family: str, k8s: str, arch: str, variant: str) -> str:
    digest = hashlib.sha256(
        f"nodewright:{region}:{family}:{k8s}:{arch}:{variant}".encode()
    ).hexdigest()
    return "ami-" + digest[:17]


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def images_for_region(region: str) -> list[dict[str, Any]]:
    """Every seeded image of a region, with the SSM parameters that point at it."""
    out: list[dict[str, Any]] = []
    for k8s in K8S_VERSIONS:
        # Amazon Linux 2: recommended/{image_id,image_name,release_version} + JSON parent.
        if SETTINGS["al2_all_versions"] or _vkey(k8s) <= _vkey(AL2_LAST_VERSION):
            for suffix, arch, variant, name_part in (
                ("amazon-linux-2", "x86_64", "standard", "node"),
                ("amazon-linux-2-arm64", "arm64", "standard", "arm64-node"),
                ("amazon-linux-2-gpu", "x86_64", "gpu", "gpu-node"),
            ):
                name = f"amazon-eks-{name_part}-{k8s}-v{AL_RELEASE_DATE}"
                out.append(
                    {
                        "family": "al2",
                        "k8s": k8s,
                        "arch": arch,
                        "variant": variant,
                        "image_id": ami_id(region, "al2", k8s, arch, variant),
                        "name": name,
                        "owner": AMAZON_EKS_AMI_OWNER,
                        "release": f"{k8s}.0-{AL_RELEASE_DATE}",
                        "base": f"/aws/service/eks/optimized-ami/{k8s}/{suffix}/recommended",
                    }
                )
        # Amazon Linux 2023: <arch>/<standard|nvidia>/recommended/...
        for arch in ("x86_64", "arm64"):
            for variant in ("standard", "nvidia"):
                name = f"amazon-eks-node-al2023-{arch}-{variant}-{k8s}-v{AL_RELEASE_DATE}"
                out.append(
                    {
                        "family": "al2023",
                        "k8s": k8s,
                        "arch": arch,
                        "variant": variant,
                        "image_id": ami_id(region, "al2023", k8s, arch, variant),
                        "name": name,
                        "owner": AMAZON_EKS_AMI_OWNER,
                        "release": f"{k8s}.0-{AL_RELEASE_DATE}",
                        "base": f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{variant}/recommended",
                    }
                )
        # Bottlerocket: aws-k8s-<k8s>[-nvidia]/<arch>/latest/{image_id,image_version}
        for arch in ("x86_64", "arm64"):
            for variant in ("standard", "nvidia"):
                flavour = f"aws-k8s-{k8s}" + ("-nvidia" if variant == "nvidia" else "")
                br_arch = "aarch64" if arch == "arm64" else "x86_64"
                out.append(
                    {
                        "family": "bottlerocket",
                        "k8s": k8s,
                        "arch": arch,
                        "variant": variant,
                        "image_id": ami_id(region, "bottlerocket", k8s, arch, variant),
                        "name": f"bottlerocket-{flavour}-{br_arch}-v{BOTTLEROCKET_VERSION}-0a1b2c3d",
                        "owner": BOTTLEROCKET_AMI_OWNER,
                        "release": BOTTLEROCKET_VERSION,
                        "base": f"/aws/service/bottlerocket/{flavour}/{arch}/latest",
                    }
                )
    return out


def parameters_for_region(region: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for img in images_for_region(region):
        base = img["base"]
        params[f"{base}/image_id"] = img["image_id"]
        if img["family"] == "bottlerocket":
            params[f"{base}/image_version"] = img["release"]
        else:
            params[f"{base}/image_name"] = img["name"]
            params[f"{base}/release_version"] = img["release"]
            params[base] = json.dumps(
                {
                    "schema_version": "2",
                    "image_id": img["image_id"],
                    "image_name": img["name"],
                    "release_version": img["release"],
                },
                separators=(",", ":"),
            )
    return params


# --------------------------------------------------------------------------
# Seeding into moto's in-process backends
# --------------------------------------------------------------------------


def seed_parameter_dict(pdict: Any) -> None:
    """Put the EKS AMI parameters into one moto SSM ParameterDict."""
    from moto.core.utils import utcnow
    from moto.ssm.models import Parameter

    now = utcnow()
    for name, value in parameters_for_region(pdict.region_name).items():
        param = Parameter(
            account_id=pdict.account_id,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=now,
            version=1,
            data_type="text",
        )
        # Bypass ParameterDict.__getitem__ (lazy loaders) and replace any
        # existing history: the seeded value is always version 1.
        dict.__setitem__(pdict, name, [param])


def seed_ami_backend(backend: Any) -> None:
    """Register the seeded AMIs in one moto EC2 backend (one account+region)."""
    from moto.ec2.models.amis import Ami

    region = backend.region_name
    for img in images_for_region(region):
        if img["image_id"] in backend.amis:
            continue
        backend.amis[img["image_id"]] = Ami(
            backend,
            img["image_id"],
            name=img["name"],
            description=f"nodewright seeded {img['family']} {img['variant']} image, Kubernetes {img['k8s']}",
            owner_id=img["owner"],
            owner_alias="amazon",
            public=True,
            virtualization_type="hvm",
            architecture=img["arch"],
            hypervisor="xen",
            root_device_type="ebs",
            root_device_name="/dev/xvda",
            region_name=f"{region}a",
            boot_mode="uefi-preferred",
        )


def install_hooks() -> None:
    """Seed every SSM parameter store / EC2 AMI table moto creates.

    `POST /moto-api/reset` re-creates the backends through these same
    constructors, so seeding survives a reset without any extra call.
    """
    from moto.ec2.models.amis import AmiBackend
    from moto.ssm.models import ParameterDict

    if getattr(ParameterDict, "_nodewright_hooked", False):
        return
    orig_pd_init = ParameterDict.__init__

    def pd_init(self: Any, account_id: str, region_name: str) -> None:
        orig_pd_init(self, account_id, region_name)
        seed_parameter_dict(self)

    ParameterDict.__init__ = pd_init  # type: ignore[method-assign]
    ParameterDict._nodewright_hooked = True  # type: ignore[attr-defined]

    orig_load_amis = AmiBackend._load_amis

    def load_amis(self: Any) -> None:
        orig_load_amis(self)
        seed_ami_backend(self)

    AmiBackend._load_amis = load_amis  # type: ignore[method-assign]


def reseed_existing() -> list[list[str]]:
    """Re-insert parameters and images into every backend that exists now."""
    from moto.ec2.models import ec2_backends
    from moto.ssm.models import ssm_backends

    seeded: list[list[str]] = []
    for account_id, per_region in list(ssm_backends.items()):
        for region, backend in list(per_region.items()):
            seed_parameter_dict(backend._parameters)
            seeded.append([account_id, region])
    for account_id, per_region in list(ec2_backends.items()):
        for region, backend in list(per_region.items()):
            seed_ami_backend(backend)
            if [account_id, region] not in seeded:
                seeded.append([account_id, region])
    return seeded


def self_check(regions: list[str]) -> None:
    """Fail fast if moto's internals moved and the hooks no longer seed."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ssm.models import ssm_backends

    for region in regions:
        img = next(i for i in images_for_region(region) if i["family"] == "al2023")
        name = img["base"] + "/image_id"
        param = ssm_backends[DEFAULT_ACCOUNT_ID][region].get_parameter(name)
        if param is None or param.value != img["image_id"]:
            raise RuntimeError(f"seeding check failed: SSM {name} in {region}")
        if img["image_id"] not in ec2_backends[DEFAULT_ACCOUNT_ID][region].amis:
            raise RuntimeError(f"seeding check failed: AMI {img['image_id']} in {region}")


# --------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------


# Capacity reservations by id (moto has none): DescribeCapacityReservations.
CAPACITY_RESERVATIONS: dict[str, dict[str, Any]] = {}
CAPACITY_RESERVATIONS_LOCK = threading.Lock()


def _xml(text: Any) -> str:
    return (
        str(text)
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
    )


def describe_capacity_reservations_xml() -> str:
    items = []
    with CAPACITY_RESERVATIONS_LOCK:
        reservations = sorted(CAPACITY_RESERVATIONS.values(), key=lambda r: r["CapacityReservationId"])
    for r in reservations:
        fields = [
            ("capacityReservationId", r["CapacityReservationId"]),
            ("ownerId", r.get("OwnerId", "123456789012")),
            ("instanceType", r["InstanceType"]),
            ("availabilityZone", r["AvailabilityZone"]),
            ("totalInstanceCount", r.get("TotalInstanceCount", 1)),
            ("availableInstanceCount", r.get("AvailableInstanceCount", 1)),
            ("state", "active"),
            ("instanceMatchCriteria", r.get("InstanceMatchCriteria", "targeted")),
            ("reservationType", r.get("ReservationType", "default")),
        ]
        if r.get("EndDate"):
            fields.append(("endDate", r["EndDate"]))
        body = "".join(f"<{k}>{_xml(v)}</{k}>" for k, v in fields)
        tags = "".join(
            f"<item><key>{_xml(k)}</key><value>{_xml(v)}</value></item>"
            for k, v in sorted(r.get("Tags", {}).items())
        )
        items.append(f"<item>{body}<tagSet>{tags}</tagSet></item>")
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        "<requestId>nodewright-capacity-reservations</requestId>"
        f"<capacityReservationSet>{''.join(items)}</capacityReservationSet>"
        "</DescribeCapacityReservationsResponse>"
    )


def make_app() -> Any:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        create_backend_app,
    )
    from werkzeug.wrappers import Request, Response

    import moto

    moto_app = DomainDispatcherApplication(create_backend_app)

    def json_response(body: Any, status: int = 200) -> Response:
        return Response(json.dumps(body), status=status, mimetype="application/json")

    # moto's DynamoDB is not safe under concurrent requests: TransactWriteItems
    # checks conditions and applies writes without a lock, and rolls a failed
    # transaction back by restoring a deep copy of the table taken before it
    # started (erasing writes other threads made meanwhile). DynamoDB itself
    # serialises conflicting writes, so serialise DynamoDB requests here.
    dynamodb_lock = threading.Lock()

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if not path.startswith("/nodewright/"):
            if environ.get("REQUEST_METHOD") == "POST" and "/ec2/" in environ.get(
                "HTTP_AUTHORIZATION", ""
            ):
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = environ["wsgi.input"].read(length)
                environ["wsgi.input"] = io.BytesIO(body)
                if b"Action=DescribeCapacityReservations" in body:
                    resp = Response(describe_capacity_reservations_xml(), mimetype="text/xml")
                    return resp(environ, start_response)
            if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
                with dynamodb_lock:
                    # Materialise the body inside the lock.
                    return list(moto_app(environ, start_response))
            return moto_app(environ, start_response)
        req = Request(environ)
        if path == "/nodewright/health" and req.method == "GET":
            resp = json_response({"ok": True, "moto": moto.__version__})
        elif path == "/nodewright/manifest" and req.method == "GET":
            region = req.args.get("region", "us-east-1")
            resp = json_response(
                {
                    "region": region,
                    "parameters": parameters_for_region(region),
                    "images": [
                        {k: v for k, v in i.items() if k != "base"}
                        for i in images_for_region(region)
                    ],
                }
            )
        elif path == "/nodewright/seed" and req.method == "POST":
            resp = json_response({"seeded": reseed_existing()})
        elif path == "/nodewright/capacity-reservations" and req.method == "POST":
            with CAPACITY_RESERVATIONS_LOCK:
                for r in json.loads(req.get_data() or b"[]"):
                    CAPACITY_RESERVATIONS[r["CapacityReservationId"]] = r
                n = len(CAPACITY_RESERVATIONS)
            resp = json_response({"capacityReservations": n})
        else:
            resp = json_response({"error": f"no such endpoint: {req.method} {path}"}, 404)
        return resp(environ, start_response)

    return app


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--port-file", help="write the bound port here once serving")
    ap.add_argument("--manifest", help="write the seeded parameters (JSON, per region) here")
    ap.add_argument(
        "--regions",
        default="us-east-1,ap-south-1",
        help="regions seeded eagerly at start-up and in --manifest "
        "(every other region is seeded on first use)",
    )
    ap.add_argument(
        "--al2-all-versions",
        action="store_true",
        help=f"also seed AL2 parameters after Kubernetes {AL2_LAST_VERSION} (AWS has none)",
    )
    ap.add_argument(
        "--no-ami-validation",
        action="store_true",
        help="let RunInstances/CreateFleet use AMI ids that do not exist",
    )
    args = ap.parse_args(argv)

    SETTINGS["al2_all_versions"] = args.al2_all_versions
    if args.no_ami_validation:
        os.environ.pop("MOTO_ENABLE_AMI_VALIDATION", None)
    else:
        os.environ["MOTO_ENABLE_AMI_VALIDATION"] = "true"
    regions = [r.strip() for r in args.regions.split(",") if r.strip()]

    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    import moto

    install_hooks()

    server = make_server(
        args.host, args.port, make_app(), threaded=True, request_handler=MotoRequestHandler
    )
    port = server.server_address[1]
    # moto builds some URLs (e.g. SQS QueueUrl) from MOTO_PORT.
    os.environ["MOTO_PORT"] = str(port)

    # Create (and so seed) the named regions now, so the first request is fast.
    self_check(regions)
    if args.manifest:
        write_atomic(
            args.manifest,
            json.dumps({r: parameters_for_region(r) for r in regions}, indent=1) + "\n",
        )

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    thread = threading.Thread(target=server.serve_forever, name="moto", daemon=True)
    thread.start()
    if args.port_file:
        write_atomic(args.port_file, f"{port}\n")
    print(f"NODEWRIGHT_MOTO_PORT={port}", flush=True)
    print(
        f"moto {moto.__version__} serving on http://{args.host}:{port} (pid {os.getpid()})",
        file=sys.stderr,
        flush=True,
    )

    while not stop.wait(3600):
        pass
    print("shutting down moto", file=sys.stderr, flush=True)
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
    if args.port_file:
        try:
            os.unlink(args.port_file)
        except FileNotFoundError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
