package main

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestWantSizeRoundsUpToWholeMiBWithinTheLimit(t *testing.T) {
	cases := []struct {
		req, lim, want int64
		code           codes.Code
	}{
		{req: 256 * mib, want: 256 * mib},
		{req: 256*mib + 1, want: 257 * mib},
		{req: 1, want: minSize},
		{want: defaultSize},
		{lim: 128 * mib, want: 128 * mib},
		{req: 100 * mib, lim: 100*mib + 1, want: 100 * mib},
		{req: 100*mib + 1, lim: 100*mib + 2, code: codes.OutOfRange},
		{req: 1, lim: minSize - 1, code: codes.OutOfRange},
		{req: -1, code: codes.InvalidArgument},
	}
	for _, c := range cases {
		got, err := wantSize(&csi.CapacityRange{RequiredBytes: c.req, LimitBytes: c.lim})
		if status.Code(err) != c.code || got != c.want {
			t.Errorf("wantSize(%d, %d) = %d, %v; want %d, %v", c.req, c.lim, got, err, c.want, c.code)
		}
	}
}

func TestLogSizeIsASixtyFourthBetween8And64MiB(t *testing.T) {
	for size, want := range map[int64]int64{64 * mib: 8 * mib, 1 * gib: 16 * mib, 2*gib + 5: 32 * mib, 100 * gib: 64 * mib} {
		if got := logSize(size); got != want {
			t.Errorf("logSize(%d) = %d, want %d", size, got, want)
		}
	}
}

func TestVolumeIDsStayInsideTheStateDir(t *testing.T) {
	d := &driver{cfg: config{stateDir: "/v"}}
	if p, err := d.volumeFile("pvc-0b5e09a1-1e59-41a2-a2ef-3758f1e0b14a"); err != nil || p != "/v/pvc-0b5e09a1-1e59-41a2-a2ef-3758f1e0b14a.img" {
		t.Errorf("a provisioner name: %q, %v", p, err)
	}
	for _, id := range []string{"", "../etc", "a/b", ".hidden", "UPPER"} {
		if _, err := d.volumeFile(id); status.Code(err) != codes.InvalidArgument {
			t.Errorf("volumeFile(%q) = %v, want InvalidArgument", id, err)
		}
	}
}

func TestOnlySingleNodeXFSMountsAreSupported(t *testing.T) {
	mount := func(fs string, m csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
		return &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: m},
		}
	}
	ok := []*csi.VolumeCapability{
		mount("", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		mount("xfs", csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER),
	}
	for _, c := range ok {
		if r := unsupported(c); r != "" {
			t.Errorf("%v refused: %s", c, r)
		}
	}
	block := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	bad := []*csi.VolumeCapability{
		mount("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		mount("", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
		block,
	}
	for _, c := range bad {
		if unsupported(c) == "" {
			t.Errorf("%v accepted", c)
		}
	}
	if status.Code(checkCaps(nil)) != codes.InvalidArgument {
		t.Error("no capabilities accepted")
	}
}

func TestMountinfoEscapesAreUndone(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/end\04`: `/end\04`} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
