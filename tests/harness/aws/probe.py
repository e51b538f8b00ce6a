#!/usr/bin/env python3
"""Probe a running (seeded) moto with boto3 and print what it does.

Usage: probe.py ENDPOINT_URL   (e.g. http://127.0.0.1:40123)
Run with the harness venv's python (boto3 comes with moto). It records the
behaviour the Rust adapters have to be designed around; it is not a test
suite and asserts only what the harness itself promises (seeding).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import boto3
import botocore.exceptions
from botocore.config import Config

EP = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:5000"
KW = dict(
    endpoint_url=EP,
    aws_access_key_id="test",
    aws_secret_access_key="test",
    config=Config(retries={"max_attempts": 1, "mode": "standard"}),
)


def client(service: str, region: str = "us-east-1") -> Any:
    return boto3.client(service, region_name=region, **KW)


def show(title: str, value: Any) -> None:
    print(f"== {title}")
    print(json.dumps(value, indent=1, default=str)[:3000])


def err(e: botocore.exceptions.ClientError) -> dict[str, Any]:
    return {
        "status": e.response["ResponseMetadata"].get("HTTPStatusCode"),
        "code": e.response.get("Error", {}).get("Code"),
        "message": e.response.get("Error", {}).get("Message"),
        **{k: v for k, v in e.response.items() if k == "CancellationReasons"},
    }


def ssm_and_images() -> None:
    name = "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/standard/recommended/image_id"
    for region in ("us-east-1", "ap-south-1"):
        p = client("ssm", region).get_parameter(Name=name)["Parameter"]
        imgs = client("ec2", region).describe_images(ImageIds=[p["Value"]])["Images"]
        assert imgs and imgs[0]["ImageId"] == p["Value"], "seeded AMI not registered"
        show(
            f"ssm get_parameter + describe_images ({region})",
            {
                "parameter": {k: p[k] for k in ("Name", "Value", "Type", "DataType", "Version")},
                "image": {
                    k: imgs[0].get(k)
                    for k in ("ImageId", "Name", "Architecture", "OwnerId", "ImageOwnerAlias", "State")
                },
            },
        )


def instance_types() -> None:
    ec2 = client("ec2")
    t0 = time.monotonic()
    first = ec2.describe_instance_types()
    t_first = time.monotonic() - t0
    t0 = time.monotonic()
    names, pages = [], 0
    for page in ec2.get_paginator("describe_instance_types").paginate():
        pages += 1
        names += [t["InstanceType"] for t in page["InstanceTypes"]]
    t_all = time.monotonic() - t0
    sample = next(
        t for t in ec2.describe_instance_types(InstanceTypes=["m7g.xlarge"])["InstanceTypes"]
    )
    show(
        "describe_instance_types",
        {
            "first_page_size": len(first["InstanceTypes"]),
            "first_page_has_next_token": "NextToken" in first,
            "first_page_seconds": round(t_first, 3),
            "total": len(names),
            "unique": len(set(names)),
            "pages": pages,
            "paginated_seconds": round(t_all, 3),
            "m7g.xlarge_keys": sorted(sample.keys()),
            "m7g.xlarge": {k: sample.get(k) for k in ("VCpuInfo", "MemoryInfo", "ProcessorInfo", "NetworkInfo")},
        },
    )
    try:
        ec2.describe_instance_types(InstanceTypes=["m99.bogus"])
        show("describe_instance_types unknown type", "no error")
    except botocore.exceptions.ClientError as e:
        show("describe_instance_types unknown type", err(e))


def offerings() -> None:
    ec2 = client("ec2", "ap-south-1")
    for loc in ("availability-zone", "availability-zone-id", "region"):
        try:
            out = []
            for page in ec2.get_paginator("describe_instance_type_offerings").paginate(
                LocationType=loc,
                Filters=[{"Name": "instance-type", "Values": ["r6gd.xlarge"]}],
            ):
                out += page["InstanceTypeOfferings"]
            show(f"describe_instance_type_offerings r6gd.xlarge ap-south-1 {loc}", out)
        except botocore.exceptions.ClientError as e:
            show(f"describe_instance_type_offerings {loc}", err(e))
    total = sum(
        len(p["InstanceTypeOfferings"])
        for p in ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone"
        )
    )
    azs = client("ec2", "ap-south-1").describe_availability_zones()["AvailabilityZones"]
    show(
        "ap-south-1 offerings by AZ (total rows) + AZs",
        {"rows": total, "azs": [(z["ZoneName"], z["ZoneId"]) for z in azs]},
    )


def fleet() -> None:
    ec2 = client("ec2")
    ssm = client("ssm")
    ami = ssm.get_parameter(
        Name="/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id"
    )["Parameter"]["Value"]
    tag = {"Key": "nodewright.io/cluster", "Value": "probe"}
    vpc = ec2.create_vpc(
        CidrBlock="10.42.0.0/16",
        TagSpecifications=[{"ResourceType": "vpc", "Tags": [tag]}],
    )["Vpc"]["VpcId"]
    subnets = []
    for i, az in enumerate(("us-east-1a", "us-east-1b")):
        subnets.append(
            ec2.create_subnet(
                VpcId=vpc,
                CidrBlock=f"10.42.{i}.0/24",
                AvailabilityZone=az,
                TagSpecifications=[
                    {"ResourceType": "subnet", "Tags": [tag, {"Key": "kubernetes.io/role/internal-elb", "Value": "1"}]}
                ],
            )["Subnet"]["SubnetId"]
        )
    found = ec2.describe_subnets(
        Filters=[{"Name": "tag:nodewright.io/cluster", "Values": ["probe"]}]
    )["Subnets"]
    show("describe_subnets by tag", [(s["SubnetId"], s["AvailabilityZone"], s["AvailableIpAddressCount"]) for s in found])
    lt = ec2.create_launch_template(
        LaunchTemplateName="nodewright-probe",
        LaunchTemplateData={
            "ImageId": ami,
            "UserData": "IyEvYmluL2Jhc2g=",
            "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1},
            "TagSpecifications": [{"ResourceType": "instance", "Tags": [tag]}],
        },
    )["LaunchTemplate"]
    show("create_launch_template", {k: lt[k] for k in ("LaunchTemplateId", "LatestVersionNumber")})

    def create(token: str, capacity_type: str = "on-demand", itypes=("m5.large", "c5.large")) -> dict[str, Any]:
        req: dict[str, Any] = dict(
            Type="instant",
            ClientToken=token,
            LaunchTemplateConfigs=[
                {
                    "LaunchTemplateSpecification": {"LaunchTemplateId": lt["LaunchTemplateId"], "Version": "$Latest"},
                    "Overrides": [
                        {"InstanceType": itypes[0], "SubnetId": subnets[0], "AvailabilityZone": "us-east-1a"},
                        {"InstanceType": itypes[1], "SubnetId": subnets[1], "AvailabilityZone": "us-east-1b"},
                    ],
                }
            ],
            TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": capacity_type},
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": [tag, {"Key": "karpenter.sh/nodepool", "Value": "default"}]},
                {"ResourceType": "fleet", "Tags": [tag]},
            ],
        )
        if capacity_type == "spot":
            req["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        else:
            req["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        return ec2.create_fleet(**req)

    a = create("nodewright-probe-token-1")
    b = create("nodewright-probe-token-1")
    strip = lambda r: {k: v for k, v in r.items() if k != "ResponseMetadata"}
    show("create_fleet #1 (instant, on-demand, 2 overrides)", strip(a))
    show("create_fleet #2 (same ClientToken)", strip(b))
    ids_a = [i for x in a.get("Instances", []) for i in x["InstanceIds"]]
    ids_b = [i for x in b.get("Instances", []) for i in x["InstanceIds"]]
    show(
        "ClientToken idempotency",
        {
            "same_fleet_id": a["FleetId"] == b["FleetId"],
            "same_instances": ids_a == ids_b,
            "fleet_ids": [a["FleetId"], b["FleetId"]],
            "instances": [ids_a, ids_b],
        },
    )
    s = create("nodewright-probe-token-spot", "spot", ("m5.xlarge", "c5.xlarge"))
    show("create_fleet spot (price-capacity-optimized)", strip(s))
    bad = None
    try:
        bad = strip(create("nodewright-probe-token-bad", "on-demand", ("m99.bogus", "c5.large")))
    except botocore.exceptions.ClientError as e:
        bad = err(e)
    show("create_fleet with an unknown type in the first override", bad)

    res = ec2.describe_instances(
        Filters=[
            {"Name": "tag:nodewright.io/cluster", "Values": ["probe"]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )
    insts = [i for r in res["Reservations"] for i in r["Instances"]]
    show(
        "describe_instances tag filter",
        [
            {
                "id": i["InstanceId"],
                "type": i["InstanceType"],
                "state": i["State"]["Name"],
                "az": i["Placement"]["AvailabilityZone"],
                "subnet": i.get("SubnetId"),
                "image": i["ImageId"],
                "lifecycle": i.get("InstanceLifecycle"),
                "private_dns": i.get("PrivateDnsName"),
                "tags": sorted(t["Key"] for t in i.get("Tags", [])),
                "metadata": i.get("MetadataOptions"),
            }
            for i in insts
        ],
    )
    by_pool = ec2.describe_instances(
        Filters=[{"Name": "tag-key", "Values": ["karpenter.sh/nodepool"]}]
    )
    show("describe_instances tag-key filter count", sum(len(r["Instances"]) for r in by_pool["Reservations"]))
    ids = [i["InstanceId"] for i in insts]
    t = ec2.terminate_instances(InstanceIds=ids)
    show("terminate_instances", [(x["InstanceId"], x["PreviousState"]["Name"], x["CurrentState"]["Name"]) for x in t["TerminatingInstances"]])
    after = ec2.describe_instances(InstanceIds=ids[:1])
    show("describe_instances after terminate", [i["State"]["Name"] for r in after["Reservations"] for i in r["Instances"]])
    try:
        ec2.terminate_instances(InstanceIds=["i-0123456789abcdef0"])
        show("terminate unknown id", "no error")
    except botocore.exceptions.ClientError as e:
        show("terminate unknown id", err(e))
    fleets = ec2.describe_fleets(FleetIds=[a["FleetId"]])["Fleets"]
    show("describe_fleets", [{k: f.get(k) for k in ("FleetId", "Type", "FleetState", "ClientToken")} for f in fleets])


def spot_and_pricing() -> None:
    ec2 = client("ec2")
    try:
        h = ec2.describe_spot_price_history(
            InstanceTypes=["m5.large"], ProductDescriptions=["Linux/UNIX"], MaxResults=20
        )
        show("describe_spot_price_history m5.large", {"count": len(h["SpotPriceHistory"]), "first": h["SpotPriceHistory"][:3]})
        h2 = ec2.describe_spot_price_history()
        show("describe_spot_price_history (no filter) count", len(h2["SpotPriceHistory"]))
    except botocore.exceptions.ClientError as e:
        show("describe_spot_price_history", err(e))
    try:
        p = client("pricing").get_products(
            ServiceCode="AmazonEC2",
            Filters=[{"Type": "TERM_MATCH", "Field": "instanceType", "Value": "m5.large"}],
            MaxResults=1,
        )
        show("pricing get_products", {"count": len(p.get("PriceList", []))})
    except botocore.exceptions.ClientError as e:
        show("pricing get_products", err(e))
    except Exception as e:  # noqa: BLE001
        show("pricing get_products (non-client error)", repr(e))


def dynamodb() -> None:
    ddb = client("dynamodb")
    ddb.create_table(
        TableName="nodewright-probe",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.put_item(TableName="nodewright-probe", Item={"pk": {"S": "lease"}, "owner": {"S": "a"}, "v": {"N": "1"}})
    try:
        ddb.put_item(
            TableName="nodewright-probe",
            Item={"pk": {"S": "lease"}, "owner": {"S": "b"}, "v": {"N": "2"}},
            ConditionExpression="attribute_not_exists(pk) OR v = :v",
            ExpressionAttributeValues={":v": {"N": "7"}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        show("conditional put", "no error (unexpected)")
    except botocore.exceptions.ClientError as e:
        show("conditional put", {**err(e), "Item": e.response.get("Item")})
    try:
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "nodewright-probe", "Item": {"pk": {"S": "other"}}}},
                {
                    "Update": {
                        "TableName": "nodewright-probe",
                        "Key": {"pk": {"S": "lease"}},
                        "UpdateExpression": "SET v = :n",
                        "ConditionExpression": "v = :v",
                        "ExpressionAttributeValues": {":v": {"N": "7"}, ":n": {"N": "8"}},
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                },
            ]
        )
        show("transact_write_items", "no error (unexpected)")
    except botocore.exceptions.ClientError as e:
        show("transact_write_items cancellation", err(e))
    got = ddb.get_item(TableName="nodewright-probe", Key={"pk": {"S": "other"}})
    show("transaction atomic (item 'other' absent)", "Item" not in got)


def sqs() -> None:
    q = client("sqs")
    url = q.create_queue(QueueName="nodewright-probe")["QueueUrl"]
    q.send_message(QueueUrl=url, MessageBody='{"kind":"probe"}', MessageAttributes={"a": {"DataType": "String", "StringValue": "x"}})
    m = q.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, MessageAttributeNames=["All"])["Messages"]
    q.delete_message(QueueUrl=url, ReceiptHandle=m[0]["ReceiptHandle"])
    fifo = q.create_queue(QueueName="nodewright-probe.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
    q.send_message(QueueUrl=fifo, MessageBody="x", MessageGroupId="g")
    q.send_message(QueueUrl=fifo, MessageBody="x", MessageGroupId="g")
    n = len(q.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10).get("Messages", []))
    show("sqs", {"queue_url": url, "received": [(x["Body"], x.get("MessageAttributes")) for x in m], "fifo_dedup_received": n})


def eks() -> None:
    e = client("eks")
    c = e.create_cluster(
        name="nodewright-probe",
        version="1.32",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1", "subnet-2"]},
    )["cluster"]
    d = e.describe_cluster(name="nodewright-probe")["cluster"]
    show(
        "eks create/describe_cluster",
        {
            "create_status": c.get("status"),
            "describe": {k: d.get(k) for k in ("name", "arn", "status", "version", "platformVersion", "endpoint", "certificateAuthority", "kubernetesNetworkConfig", "resourcesVpcConfig", "accessConfig")},
        },
    )
    e2 = client("eks")
    try:
        e2.create_cluster(name="nodewright-probe-default", roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={})
        show("eks default version", e2.describe_cluster(name="nodewright-probe-default")["cluster"].get("version"))
    except botocore.exceptions.ClientError as ex:
        show("eks create without version", err(ex))


def reset_survives() -> None:
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{EP}/moto-api/reset", method="POST")).read()
    ssm = client("ssm", "ap-south-1")
    p = ssm.get_parameter(Name="/aws/service/bottlerocket/aws-k8s-1.34-nvidia/arm64/latest/image_id")["Parameter"]["Value"]
    img = client("ec2", "ap-south-1").describe_images(ImageIds=[p])["Images"]
    vpcs = client("ec2").describe_vpcs(Filters=[{"Name": "tag:nodewright.io/cluster", "Values": ["probe"]}])["Vpcs"]
    show("after POST /moto-api/reset", {"bottlerocket_nvidia_arm64_1.34": p, "image_registered": bool(img), "probe_vpcs_left": len(vpcs)})
    body = urllib.request.urlopen(urllib.request.Request(f"{EP}/nodewright/seed", method="POST")).read()
    show("POST /nodewright/seed", json.loads(body))


if __name__ == "__main__":
    for step in (ssm_and_images, instance_types, offerings, fleet, spot_and_pricing, dynamodb, sqs, eks, reset_survives):
        try:
            step()
        except Exception as e:  # noqa: BLE001
            show(f"{step.__name__} FAILED", repr(e))
