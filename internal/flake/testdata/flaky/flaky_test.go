// Package flaky is a tiny Ginkgo suite for flake's tests: "counts" fails on the run whose number
// FLAKY_FAIL_AT names, counting runs in the file FLAKY_COUNTER.
package flaky

import (
	"os"
	"strconv"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestFlaky(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "flaky")
}

var _ = Describe("flaky", func() {
	It("steady", func() {})
	It("counts", func() {
		b, _ := os.ReadFile(os.Getenv("FLAKY_COUNTER"))
		n, _ := strconv.Atoi(string(b))
		n++
		Expect(os.WriteFile(os.Getenv("FLAKY_COUNTER"), []byte(strconv.Itoa(n)), 0o644)).To(Succeed())
		Expect(strconv.Itoa(n)).NotTo(Equal(os.Getenv("FLAKY_FAIL_AT")), "run %d fails on purpose", n)
	})
})
