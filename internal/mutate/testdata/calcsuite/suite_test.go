// Package calcsuite is a fake scenario suite for internal/mutate's end-to-end test: a Ginkgo suite over
// package calc that runs each spec once per mutant of ENSEMBLE_MUTANTS, making the next one active
// between runs, noting each run's end and, under flake attempts, failing a run that passed on purpose, as
// the harness does (suite.Runs, mutant.Done, mutant.Begin, mutant.End).
package calcsuite

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/ensembletest/ensemble/internal/mutate/testdata/calc"
	"github.com/ensembletest/ensemble/suite/mutant"
)

func TestCalc(t *testing.T) {
	RegisterFailHandler(Fail)
	cfg, rep := GinkgoConfiguration()
	if ids, _ := mutant.Runs(); len(ids) > 1 && !mutant.Retrying() {
		cfg.MustPassRepeatedly = len(ids)
	}
	RunSpecs(t, "calc suite", cfg, rep)
}

// attempts counts each spec's runs in the process.
var attempts = map[string]int{}

var _ = BeforeEach(func() {
	name := CurrentSpecReport().FullText()
	attempts[name]++
	run := attempts[name]
	switch {
	case mutant.Done(name, run):
		Fail(mutant.ErrDone.Error())
	case !mutant.Began():
		mutant.Mark(name, run)
	default:
		Expect(mutant.Begin(name, run)).To(Succeed())
	}
	DeferCleanup(func() {
		if err := mutant.End(name, run, CurrentSpecReport().Failed()); err != nil {
			Fail(err.Error())
		}
	})
})

var _ = Describe("calc", func() {
	It("clamps", func() {
		Expect(calc.Clamp(5, 0, 10)).To(Equal(5))
		Expect(calc.Clamp(-1, 0, 10)).To(Equal(0))
	})
	It("sums", func() {
		Expect(calc.Sum(3)).To(Equal(6))
	})
	It("finds the first", func() {
		Expect(calc.First(nil)).To(Equal(0))
		Expect(calc.First([]int{4})).To(Equal(4))
	})
	It("scales", func() {
		Expect(calc.Scale(2)).To(Equal(12))
	})
	It("limits", func() {
		Expect(calc.Limit).To(Equal(11))
	})
	It("greets", func() {
		Expect(calc.Greeting("x")).To(Equal("hi x"))
	})
})
