package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
	// Smallest volume: XFS's log and metadata need some room.
	minSize = 64 * mib
	// Size of a volume whose request names no capacity.
	defaultSize = 1 * gib
	fsType      = "xfs"
)

// driver holds what the three services share. One lock serializes the
// operations that change volumes: they are few and quick on one node, and the
// sidecars and the kubelet retry anything that has to wait.
type driver struct {
	cfg config
	mu  sync.Mutex
}

// Volume IDs are the names the provisioner generates (pvc-<uid>); anything
// else could escape the state dir.
var validID = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,252}$`)

func (d *driver) volumeFile(id string) (string, error) {
	if !validID.MatchString(id) {
		return "", status.Errorf(codes.InvalidArgument, "volume id %q: want lowercase letters, digits, '.' and '-'", id)
	}
	return filepath.Join(d.cfg.stateDir, id+".img"), nil
}

// fileSize returns the volume's size, or NotFound.
func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, status.Errorf(codes.NotFound, "volume file %s does not exist", path)
	}
	if err != nil {
		return 0, status.Errorf(codes.Internal, "stat %s: %v", path, err)
	}
	return st.Size(), nil
}

// wantSize turns a capacity range into a size in whole MiB, at least minSize.
func wantSize(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, status.Error(codes.InvalidArgument, "negative capacity")
	}
	size := req
	if size == 0 {
		size = defaultSize
		if lim > 0 && lim < size {
			size = lim
		}
	}
	size = max((size+mib-1)/mib*mib, minSize)
	if lim > 0 && size > lim {
		return 0, status.Errorf(codes.OutOfRange, "%d bytes rounded up to whole MiB (at least %d) exceed the limit %d", req, minSize, lim)
	}
	return size, nil
}

// checkCaps accepts single-node mount volumes (xfs or no fs type named).
func checkCaps(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "no volume capabilities")
	}
	for _, c := range caps {
		if reason := unsupported(c); reason != "" {
			return status.Error(codes.InvalidArgument, reason)
		}
	}
	return nil
}

func unsupported(c *csi.VolumeCapability) string {
	m := c.GetMount()
	if m == nil {
		return "only filesystem (mount) volumes are supported, not block"
	}
	if fs := m.GetFsType(); fs != "" && fs != fsType {
		return fmt.Sprintf("fs type %q: only %s", fs, fsType)
	}
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return ""
	}
	return fmt.Sprintf("access mode %v: only single-node modes", c.GetAccessMode().GetMode())
}
