// Package suite is ensemble's harness: it boots one envtest API server (real kube-apiserver and etcd), runs
// every reconciler of one or more operators against it at once, and gives scenario specs the vocabulary for
// defects that live between controllers: the writes each controller made and in which reconcile pass, the
// changes each watched object went through, quiescence, and KnownDefect pins.
//
// The package knows no operator. An operator is wired in through ManagerOptions.Register, which receives a
// Wiring: the recording client and the reconciler wrapper (gate, pass accounting, requeue compression) for
// each controller it sets up. See README.md for a scenario written with it.
//
// Typical use from Ginkgo:
//
//	var s *suite.Suite
//	var _ = BeforeSuite(func() {
//		var err error
//		s, err = suite.Boot(ctx, suite.Options{...})
//		Expect(err).NotTo(HaveOccurred())
//		DeferCleanup(s.Stop)
//	})
//	It("...", func() {
//		c := s.NewCase(GinkgoT())
//		...
//		Expect(c.RequireQuiescent(time.Second, 20*time.Second)).To(Succeed())
//	})
//
// Plain testing.T works the same way: pass t to NewCase.
package suite
