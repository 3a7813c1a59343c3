package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type controller struct {
	csi.UnimplementedControllerServer
	d *driver
}

func (c controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	cap := func(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
		return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}}
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{
		cap(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME),
		cap(csi.ControllerServiceCapability_RPC_EXPAND_VOLUME),
	}}, nil
}

func (c controller) volume(id string, size int64) *csi.Volume {
	return &csi.Volume{
		VolumeId:           id,
		CapacityBytes:      size,
		AccessibleTopology: []*csi.Topology{{Segments: map[string]string{topologyKey: c.d.cfg.nodeID}}},
	}
}

// CreateVolume makes <name>.img: a sparse file of the size asked for, with an
// XFS filesystem on it. It is built under a temporary name and renamed, so a
// file with the final name is always complete.
func (c controller) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources (snapshots, clones) are not supported")
	}
	if err := checkCaps(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	size, err := wantSize(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	path, err := c.d.volumeFile(req.GetName())
	if err != nil {
		return nil, err
	}
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if have, err := fileSize(path); err == nil {
		// the same request again: answer as before; another size: refuse
		if have < size || (req.GetCapacityRange().GetLimitBytes() > 0 && have > req.GetCapacityRange().GetLimitBytes()) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes, incompatible with %v", req.GetName(), have, req.GetCapacityRange())
		}
		return &csi.CreateVolumeResponse{Volume: c.volume(req.GetName(), have)}, nil
	}
	tmp := path + ".new"
	if err := makeFilesystem(tmp, size); err != nil {
		_ = os.Remove(tmp)
		return nil, status.Errorf(codes.Internal, "create %s: %v", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, status.Errorf(codes.Internal, "rename %s: %v", tmp, err)
	}
	return &csi.CreateVolumeResponse{Volume: c.volume(req.GetName(), size)}, nil
}

func makeFilesystem(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// mkfs.xfs refuses filesystems under 300 MB and logs under 64 MiB unless
	// it runs under fstests, which it recognizes by these variables. Small
	// volumes keep the e2e fill tests quick, and a log sized to the volume
	// keeps the filesystem close to the requested size (a 64 MiB log would
	// take a fifth of a 300 MiB volume). -K: the file is sparse already.
	cmd := exec.Command("mkfs.xfs", "-q", "-f", "-K", "-l", fmt.Sprintf("size=%dm", logSize(size)/mib), path)
	cmd.Env = append(os.Environ(), "TEST_DIR="+filepath.Dir(path), "TEST_DEV="+path, "QA_CHECK_FS=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.xfs: %v: %s", err, out)
	}
	return nil
}

// logSize is 1/64 of the volume, between 8 and 64 MiB, in whole MiB.
func logSize(size int64) int64 {
	return min(max(size/64/mib*mib, 8*mib), 64*mib)
}

// DeleteVolume removes the file. The kubelet has unstaged the volume (and so
// detached its loop device) before the PV is released; were a loop device
// still attached, it keeps the data alive until detached, nothing breaks.
func (c controller) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	path, err := c.d.volumeFile(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if devs, err := loopsOf(path); err == nil && len(devs) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still attached as %v", req.GetVolumeId(), devs)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove %s: %v", path, err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (c controller) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	path, err := c.d.volumeFile(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if _, err := fileSize(path); err != nil {
		return nil, err
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no volume capabilities")
	}
	for _, cp := range req.GetVolumeCapabilities() {
		if reason := unsupported(cp); reason != "" {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: reason}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

// ControllerExpandVolume lengthens the file; the filesystem grows on the node
// (NodeExpandVolume). Never shrinks.
func (c controller) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	path, err := c.d.volumeFile(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "no capacity range")
	}
	size, err := wantSize(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	have, err := fileSize(path)
	if err != nil {
		return nil, err
	}
	if have < size {
		if err := os.Truncate(path, size); err != nil {
			return nil, status.Errorf(codes.Internal, "grow %s to %d: %v", path, size, err)
		}
		have = size
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: have, NodeExpansionRequired: true}, nil
}
