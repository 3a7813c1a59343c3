// Command csi-loop is the e2e cluster's CSI driver: each volume is a sparse
// file under --state-dir, formatted XFS and attached through a loop device,
// so a pod sees a real filesystem on a device of exactly the requested size
// that fills up (ENOSPC) and grows online (ControllerExpandVolume lengthens
// the file, NodeExpandVolume refreshes the loop device and runs xfs_growfs on
// the mounted filesystem).
//
// XFS, not ext4: growing a mounted ext4 (resize2fs) needs CAP_SYS_RESOURCE,
// which root lacks on the machines this cluster runs on; xfs_growfs needs
// only CAP_SYS_ADMIN. One process serves the Identity, Controller and Node services
// on --endpoint (the upstream external-provisioner and external-resizer and
// the kubelet all talk to it) and registers itself with the kubelet through
// the kubelet's plugin-registration socket in --registration-dir.
//
// Single node only: the controller and the node side run on the same host.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const version = "0.1.0"

// topologyKey pins each volume to the node that holds its file.
const topologyKey = "topology.csi-loop.tusk.dev/node"

type config struct {
	name        string
	endpoint    string
	stateDir    string
	nodeID      string
	registerDir string
}

func main() {
	var c config
	flag.StringVar(&c.name, "driver-name", "csi-loop.tusk.dev", "CSI driver name (the CSIDriver object and the StorageClass provisioner)")
	flag.StringVar(&c.endpoint, "endpoint", "", "unix socket path to serve the CSI services on")
	flag.StringVar(&c.stateDir, "state-dir", "", "directory holding the volume files")
	flag.StringVar(&c.nodeID, "node-id", "", "this node's name")
	flag.StringVar(&c.registerDir, "registration-dir", "", "the kubelet's plugins_registry directory (empty: do not register)")
	flag.Parse()
	if c.endpoint == "" || c.stateDir == "" || c.nodeID == "" {
		log.Fatal("--endpoint, --state-dir and --node-id are required")
	}
	if err := serve(c); err != nil {
		log.Fatal(err)
	}
}

func serve(c config) error {
	if err := os.MkdirAll(c.stateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	d := &driver{cfg: c}
	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(srv, identity{d: d})
	csi.RegisterControllerServer(srv, controller{d: d})
	csi.RegisterNodeServer(srv, node{d: d})
	lis, err := listenUnix(c.endpoint)
	if err != nil {
		return err
	}
	errs := make(chan error, 2)
	go func() { errs <- srv.Serve(lis) }()
	log.Printf("%s %s serving on %s, volumes in %s", c.name, version, c.endpoint, c.stateDir)

	var reg *grpc.Server
	if c.registerDir != "" {
		// The kubelet watches this directory; a socket appearing there is how
		// a plugin announces itself (what node-driver-registrar does).
		regSock := filepath.Join(c.registerDir, c.name+"-reg.sock")
		rl, err := listenUnix(regSock)
		if err != nil {
			return err
		}
		reg = grpc.NewServer()
		registerapi.RegisterRegistrationServer(reg, registration{d: d})
		go func() { errs <- reg.Serve(rl) }()
		log.Printf("kubelet registration socket %s", regSock)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sigs:
		log.Printf("%v: stopping", s)
	case err := <-errs:
		log.Printf("server stopped: %v", err)
	}
	if reg != nil {
		reg.Stop() // removes the socket: the kubelet deregisters the driver
	}
	srv.GracefulStop()
	return nil
}

// listenUnix replaces a stale socket left by an earlier run.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return net.Listen("unix", path)
}

func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	switch info.FullMethod {
	case "/csi.v1.Identity/Probe", "/csi.v1.Node/NodeGetCapabilities", "/csi.v1.Node/NodeGetVolumeStats":
		if err == nil {
			return resp, err // polled often: log failures only
		}
	}
	if err != nil {
		log.Printf("%s %v: error: %v", info.FullMethod, req, err)
	} else {
		log.Printf("%s %v: ok %v", info.FullMethod, req, resp)
	}
	return resp, err
}

type registration struct {
	registerapi.UnimplementedRegistrationServer
	d *driver
}

func (r registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.d.cfg.name,
		Endpoint:          r.d.cfg.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.PluginRegistered {
		log.Printf("registered with the kubelet")
	} else {
		log.Printf("kubelet refused the registration: %s", s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
