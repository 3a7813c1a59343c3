package main

import (
	"context"
	"errors"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type node struct {
	csi.UnimplementedNodeServer
	d *driver
}

func (n node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             n.d.cfg.nodeID,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{topologyKey: n.d.cfg.nodeID}},
	}, nil
}

func (n node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	cap := func(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
		return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{
		cap(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME),
		cap(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS),
		cap(csi.NodeServiceCapability_RPC_EXPAND_VOLUME),
	}}, nil
}

// NodeStageVolume attaches the file to a loop device and mounts its XFS at
// the staging path (once per volume on the node).
func (n node) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	path, err := n.d.volumeFile(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	target := req.GetStagingTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "no staging target path")
	}
	if err := checkCaps([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	if _, err := fileSize(path); err != nil {
		return nil, err
	}
	dev, err := attach(path)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "attach %s: %v", path, err)
	}
	src, err := mountSource(target)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read mounts: %v", err)
	}
	if src == dev {
		return &csi.NodeStageVolumeResponse{}, nil
	}
	if src != "" {
		return nil, status.Errorf(codes.AlreadyExists, "%s is mounted from %s, not %s", target, src, dev)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "mkdir %s: %v", target, err)
	}
	if err := unix.Mount(dev, target, fsType, unix.MS_NOATIME, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "mount %s (%s) at %s: %v", dev, path, target, err)
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (n node) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	path, err := n.d.volumeFile(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	target := req.GetStagingTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "no staging target path")
	}
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	if err := unmount(target); err != nil {
		return nil, err
	}
	if err := detach(path); err != nil {
		return nil, status.Errorf(codes.Internal, "detach %s: %v", path, err)
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// unmount undoes every mount at target (an interrupted retry may have stacked
// two) and is a no-op when there is none.
func unmount(target string) error {
	for {
		mounted, err := isMountPoint(target)
		if err != nil {
			return status.Errorf(codes.Internal, "read mounts: %v", err)
		}
		if !mounted {
			return nil
		}
		if err := unix.Unmount(target, 0); err != nil {
			return status.Errorf(codes.Internal, "unmount %s: %v", target, err)
		}
	}
}

// NodePublishVolume bind-mounts the staged filesystem at the pod's path.
func (n node) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if _, err := n.d.volumeFile(req.GetVolumeId()); err != nil {
		return nil, err
	}
	staging, target := req.GetStagingTargetPath(), req.GetTargetPath()
	if staging == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "staging and target paths are required")
	}
	if err := checkCaps([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	stagedFrom, err := mountSource(staging)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read mounts: %v", err)
	}
	if stagedFrom == "" {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", req.GetVolumeId(), staging)
	}
	src, err := mountSource(target)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read mounts: %v", err)
	}
	if src == stagedFrom {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if src != "" {
		return nil, status.Errorf(codes.AlreadyExists, "%s is mounted from %s", target, src)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "mkdir %s: %v", target, err)
	}
	if err := unix.Mount(staging, target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind %s at %s: %v", staging, target, err)
	}
	if req.GetReadonly() {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "remount %s read-only: %v", target, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n node) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if _, err := n.d.volumeFile(req.GetVolumeId()); err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "no target path")
	}
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	if err := unmount(target); err != nil {
		return nil, err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove %s: %v", target, err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeExpandVolume grows the mounted filesystem to the file's new length:
// the loop device learns the length (losetup -c), then xfs_growfs grows the
// mounted XFS.
func (n node) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	path, err := n.d.volumeFile(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume path")
	}
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	size, err := fileSize(path)
	if err != nil {
		return nil, err
	}
	devs, err := loopsOf(path)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "list loop devices: %v", err)
	}
	if len(devs) == 0 {
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged on this node", req.GetVolumeId())
	}
	if want := req.GetCapacityRange().GetRequiredBytes(); want > size {
		return nil, status.Errorf(codes.OutOfRange, "volume %s holds %d bytes, %d asked: the controller has not grown it", req.GetVolumeId(), size, want)
	}
	for _, dev := range devs {
		if _, err := run("losetup", "--set-capacity", dev); err != nil {
			return nil, status.Errorf(codes.Internal, "%v", err)
		}
	}
	mnt := req.GetStagingTargetPath()
	if mnt == "" {
		mnt = req.GetVolumePath()
	}
	if _, err := run("xfs_growfs", mnt); err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

func (n node) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if _, err := n.d.volumeFile(req.GetVolumeId()); err != nil {
		return nil, err
	}
	p := req.GetVolumePath()
	if p == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume path")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, status.Errorf(codes.NotFound, "%s: %v", p, err)
		}
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", p, err)
	}
	bs := st.Bsize
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}
