// cert-manager's controller for the local cluster, reduced to what Tusk's
// e2e tests use: Certificates (trigger, key manager, request manager,
// issuing, readiness, revision manager), CertificateRequests (the default
// approver, the CA and SelfSigned issuers) and the Issuer/ClusterIssuer
// readiness controllers. A host process with a kubeconfig, no leader
// election, no metrics or health listeners.
//
// Why not cert-manager's own cmd/controller: it is a module of its own
// (github.com/cert-manager/cert-manager/controller-binary) with a replace
// directive to its parent and no tags, so the Go module proxy does not
// serve it. Its library, github.com/cert-manager/cert-manager, is served:
// this main wires that library's controllers the way cmd/controller's Run
// does, and leaves out the ACME, Vault and Venafi issuers (with their cloud
// DNS SDKs, most of the build), the ingress and Gateway shims and the
// CertificateSigningRequest signers.
//
// Why neither the webhook nor the cainjector: the webhook only validates
// and converts cert-manager's own resources (the CRDs serve v1 alone, and
// their schemas hold the structure); the cainjector only copies CA bundles
// into webhook configurations and API services, of which there are none here.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig")
	clusterNamespace := flag.String("cluster-resource-namespace", "cert-manager",
		"where ClusterIssuers keep their Secrets")
	ownerRef := flag.Bool("enable-certificate-owner-ref", true,
		"make each Certificate the owner of its Secret (deleted with it)")
	workers := flag.Int("workers", 2, "workers per controller")
	klog.InitFlags(nil) // -v: cert-manager logs its progress at 2
	flag.Parse()

	logf.InitLogs()
	defer logf.FlushLogs()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	if err := run(ctx, *kubeconfig, *clusterNamespace, *ownerRef, *workers); err != nil {
		logf.Log.Error(err, "cert-manager controller failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, clusterNamespace string, ownerRef bool, workers int) error {
	log := logf.FromContext(ctx)
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace: clusterNamespace,
		},
		CertificateOptions: controller.CertificateOptions{
			EnableOwnerRef: ownerRef,
			// cert-manager's defaults.
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}
	known := controller.Known()
	names := make([]string, 0, len(known))
	for name := range known {
		names = append(names, name)
	}
	sort.Strings(names)
	log.Info("starting cert-manager controllers", "controllers", names)
	g, ctx := errgroup.WithContext(ctx)
	for _, name := range names {
		loop, err := known[name](factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		g.Go(func() error { return loop.Run(workers, ctx) })
	}
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	err = g.Wait()
	base.HTTP01ResourceMetadataInformersFactory.Shutdown()
	base.KubeSharedInformerFactory.Shutdown()
	base.SharedInformerFactory.Shutdown()
	return err
}
