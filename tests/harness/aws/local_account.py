"""What a first try needs in the emulated account (functions/README.md, "Run it locally"):
a VPC with one subnet per zone and a security group, all tagged
karpenter.sh/discovery=<cluster> as infra/examples/local/nodepool.yaml
selects them, and an EKS cluster of that name (the functions read its
endpoint and Kubernetes version). Idempotent: what exists is kept.

    python local_account.py CLUSTER [--version 1.32]

Reads AWS_ENDPOINT_URL and AWS_REGION from the environment (moto.sh's env
file); refuses to run without an endpoint, so it never touches a real
account.
"""

import argparse
import os
import sys

import boto3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cluster")
    p.add_argument("--version", default="1.32")
    args = p.parse_args()
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        print("local_account: AWS_ENDPOINT_URL is not set: this only seeds the emulator", file=sys.stderr)
        return 2
    region = os.environ.get("AWS_REGION", "us-east-1")
    ec2 = boto3.client("ec2", region_name=region, endpoint_url=endpoint)
    eks = boto3.client("eks", region_name=region, endpoint_url=endpoint)
    tag = {"Key": "karpenter.sh/discovery", "Value": args.cluster}
    by_tag = [{"Name": "tag:karpenter.sh/discovery", "Values": [args.cluster]}]

    vpcs = ec2.describe_vpcs(Filters=by_tag)["Vpcs"]
    if vpcs:
        vpc = vpcs[0]["VpcId"]
    else:
        vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16", TagSpecifications=[{"ResourceType": "vpc", "Tags": [tag]}])["Vpc"]["VpcId"]
    zones = [z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]][:3]
    have = {s["AvailabilityZone"]: s["SubnetId"] for s in ec2.describe_subnets(Filters=by_tag)["Subnets"]}
    for i, zone in enumerate(zones):
        if zone not in have:
            have[zone] = ec2.create_subnet(
                VpcId=vpc, AvailabilityZone=zone, CidrBlock=f"10.42.{i * 16}.0/20",
                TagSpecifications=[{"ResourceType": "subnet", "Tags": [tag]}],
            )["Subnet"]["SubnetId"]
    groups = ec2.describe_security_groups(Filters=by_tag)["SecurityGroups"]
    if groups:
        group = groups[0]["GroupId"]
    else:
        group = ec2.create_security_group(
            GroupName=f"{args.cluster}-nodes", Description="nodes of the local cluster", VpcId=vpc,
            TagSpecifications=[{"ResourceType": "security-group", "Tags": [tag]}],
        )["GroupId"]
    if args.cluster not in eks.list_clusters()["clusters"]:
        eks.create_cluster(
            name=args.cluster, version=args.version, roleArn="arn:aws:iam::123456789012:role/eks-cluster",
            resourcesVpcConfig={"subnetIds": [have[z] for z in zones]},
        )
    print(f"local_account: cluster {args.cluster} (Kubernetes {args.version}), {vpc}, subnets {', '.join(have[z] for z in zones)}, {group}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
